/**
 * A time-decayed ratio of two sums, `Σ wᵢ·yᵢ / Σ wᵢ·xᵢ`, where each sample's weight halves every
 * half-life: how many milliseconds of time to first token a node spends per token of prefill work,
 * learned from samples of very different sizes. It holds three numbers and never allocates.
 */

/**
 * Counts samples added to any DecayedRatio in the process, so that a reader can cache what it
 * derived from them until a new sample arrives (`expected-ttft.ts` does). Only ever increases.
 */
export const ratioSamples = { count: 0 };

export class DecayedRatio {
  /** Decayed sum of the numerators (ms of time to first token), as of `updatedMs`. */
  sumY = 0;
  /** Decayed sum of the denominators (tokens of work), as of `updatedMs`. */
  sumX = 0;
  /** Monotonic time of the last sample, ms; meaningful once `sumX > 0`. */
  updatedMs = 0;

  /**
   * Adds one sample (`y` over `x`) taken at monotonic `nowMs`. Older samples lose weight by
   * `2^(−Δt / halfLifeMs)` first. Samples that are negative, not finite, or have `x <= 0` are
   * ignored. Samples that arrive slightly out of order count as if they came at `updatedMs`.
   */
  add(y: number, x: number, nowMs: number, halfLifeMs: number): void {
    // HOT
    if (!(y >= 0 && y < Infinity && x > 0 && x < Infinity)) return;
    if (this.sumX > 0) {
      const elapsed = nowMs - this.updatedMs;
      if (elapsed > 0) {
        const keep = halfLifeMs > 0 ? Math.pow(2, -elapsed / halfLifeMs) : 0;
        this.sumY *= keep;
        this.sumX *= keep;
      }
    }
    this.sumY += y;
    this.sumX += x;
    ratioSamples.count++;
    if (nowMs > this.updatedMs) this.updatedMs = nowMs;
  }

  /** The ratio, or -1 before the first sample. */
  value(): number {
    return this.sumX > 0 ? this.sumY / this.sumX : -1;
  }

  /** Forgets every sample (the node is re-probed from a fair start). */
  reset(): void {
    ratioSamples.count++;
    this.sumY = 0;
    this.sumX = 0;
    this.updatedMs = 0;
  }
}
