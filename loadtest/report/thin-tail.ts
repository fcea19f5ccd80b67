/**
 * Which percentiles a latency series has too few samples for. With n samples, percentile p is only
 * an estimate when n ≥ 1 / (1 − p); below that it is simply the largest sample (p99.9 of 218
 * samples is their max). Reports mark such values with `*` and print `THIN_TAIL_LEGEND`. Formatting
 * only: the JSON result keeps every percentile as computed.
 */

/** The line that explains the `*` mark, printed under a table that has one. */
export const THIN_TAIL_LEGEND = '* fewer samples than the percentile needs: the largest sample';

/** Samples percentile `p` (0..100, below 100) needs: 1 / (1 − p/100), e.g. 1,000 for p99.9. */
export function samplesFor(p: number): number {
  // Rounded: in floating point 100 − 99.9 is a little under 0.1, and 100 / it a little over 1,000.
  return Math.round(100 / (100 - p));
}

/** True when `count` samples (at least one) are fewer than percentile `p` (0..100) needs. */
export function tooFewFor(p: number, count: number): boolean {
  return count > 0 && count < samplesFor(p);
}

/** `text` with a trailing `*` when `count` samples are too few for percentile `p`. */
export function markThin(text: string, p: number, count: number): string {
  return tooFewFor(p, count) ? `${text}*` : text;
}

/** True when any cell of `rows` carries the mark (`812.0*`, `812.0* (0.61×)`). */
export function hasThinMark(rows: readonly (readonly string[])[]): boolean {
  return rows.some((row) => row.some((cell) => cell.includes('*')));
}
