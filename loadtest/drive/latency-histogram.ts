/**
 * HdrHistograms of latencies in microseconds (1 µs to 1 h). The main series keep 3 significant
 * digits (0.1% precision) in flat arrays; per-tenant, per-kind and per-second series use the packed
 * form, which costs memory only for the values actually seen.
 */

import { build, type Histogram } from 'hdr-histogram-js';

/** Largest recordable latency, µs (one hour); larger values are clamped to it. */
export const HIGHEST_US = 3_600_000_000;

/** A new histogram; `packed` for the many small per-group series. */
export function createLatencyHistogram(packed = false): Histogram {
  return build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: HIGHEST_US,
    numberOfSignificantValueDigits: 3,
    bitBucketSize: packed ? 'packed' : 32,
  });
}

/** Records a duration given in (fractional) milliseconds. */
export function recordMs(h: Histogram, ms: number): void {
  const us = Math.round(ms * 1000);
  h.recordValue(us < 1 ? 1 : us > HIGHEST_US ? HIGHEST_US : us);
}

/**
 * The value at `percentile` (0–100) in milliseconds, or null when nothing was recorded: the highest
 * value equivalent to the percentile's bucket (as HdrHistogram reports it), capped at the exact max.
 */
export function percentileMs(h: Histogram, percentile: number): number | null {
  return h.totalCount === 0 ? null : Math.min(h.getValueAtPercentile(percentile), h.maxValue) / 1000;
}
