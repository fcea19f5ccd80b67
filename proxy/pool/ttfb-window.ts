/**
 * The last N latency samples of one kind for a pool (head times of answers that are not streamed, or
 * times to first token of streams), for the hedging delay ("no first token by the pool's p95").
 * A ring buffer; the percentile is recomputed at each of the first `YOUNG` samples, then every
 * `RECOMPUTE_EVERY`, so reading it on the request path is a field load.
 *
 *   samples: [ s0 s1 s2 ... s255 ]   next ──> overwrites the oldest
 */

const SIZE = 256;
const RECOMPUTE_EVERY = 16;
/** Samples up to which every one recomputes (a sort of at most this many values). */
const YOUNG = 64;

export class TtfbWindow {
  private readonly samples = new Float64Array(SIZE);
  private readonly scratch = new Float64Array(SIZE);
  private next = 0;
  /** Samples recorded since start (the window holds the last SIZE). */
  count = 0;
  /** Cached percentile value, ms; -1 until computed. */
  private cached = -1;
  private readonly percentile: number;

  /** `percentile` in 0–100 (e.g. 95). */
  constructor(percentile: number) {
    this.percentile = percentile;
  }

  /** Records one sample, ms. */
  add(ms: number): void {
    // HOT
    this.samples[this.next] = ms;
    this.next = (this.next + 1) % SIZE;
    this.count++;
    // Every sample while the window is young (hedging starts after `min_samples`, 20 by default:
    // the first samples alone must not stand for the pool until the next multiple of 16).
    if (this.count <= YOUNG || this.count % RECOMPUTE_EVERY === 0) this.recompute();
  }

  /** The configured percentile of the window, ms; -1 with no samples. */
  value(): number {
    return this.cached;
  }

  private recompute(): void {
    const n = this.count < SIZE ? this.count : SIZE;
    const s = this.scratch.subarray(0, n);
    s.set(this.samples.subarray(0, n));
    s.sort();
    const rank = Math.min(n - 1, Math.max(0, Math.ceil((this.percentile / 100) * n) - 1));
    this.cached = s[rank]!;
  }
}
