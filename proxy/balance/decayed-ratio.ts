/**
 * Time-decayed sums of samples `(xᵢ, yᵢ)`, each sample's weight `wᵢ` halving every half-life: the
 * ratio `Σ wᵢ·yᵢ / Σ wᵢ·xᵢ` (`value`) and the sums a weighted least-squares line
 * `y = intercept + slope × x` needs (`lineSlope`, `lineIntercept`). For a node: x is the prefill
 * work a request found ahead of it plus its own (tokens), y its time to first token (ms); the
 * slope is the node's milliseconds per token of work and the intercept what every request pays
 * whatever the work (the engine's step, the exchange). It holds a few numbers and never allocates.
 */

/**
 * Counts samples added to any DecayedRatio in the process, so that a reader can cache what it
 * derived from them until a new sample arrives (`expected-ttft.ts` does). Only ever increases.
 */
export const ratioSamples = { count: 0 };

/** Decayed samples below which `lineSlope` does not fit a line. */
const MIN_LINE_SAMPLES = 8;
/** Smallest coefficient of variation of x for which `lineSlope` fits a line. */
const MIN_LINE_SPREAD = 0.25;

export class DecayedRatio {
  /** Decayed sum of the numerators (ms of time to first token), as of `updatedMs`. */
  sumY = 0;
  /** Decayed sum of the denominators (tokens of work), as of `updatedMs`. */
  sumX = 0;
  /** Decayed sum of the weights (samples), as of `updatedMs`. */
  sumW = 0;
  /** Decayed sum of x², as of `updatedMs`. */
  sumXX = 0;
  /** Decayed sum of x·y, as of `updatedMs`. */
  sumXY = 0;
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
        this.sumW *= keep;
        this.sumXX *= keep;
        this.sumXY *= keep;
      }
    }
    this.sumY += y;
    this.sumX += x;
    this.sumW += 1;
    this.sumXX += x * x;
    this.sumXY += x * y;
    ratioSamples.count++;
    if (nowMs > this.updatedMs) this.updatedMs = nowMs;
  }

  /** The ratio, or -1 before the first sample. */
  value(): number {
    return this.sumX > 0 ? this.sumY / this.sumX : -1;
  }

  /**
   * The slope of the least-squares line through the samples, y per unit of x, when the samples
   * determine it: at least `MIN_LINE_SAMPLES` (decayed) of them, x spread enough (coefficient of
   * variation ≥ `MIN_LINE_SPREAD`), a positive slope and an intercept ≥ 0. Otherwise -1, and the
   * caller uses the ratio through the origin (`value`). The intercept is `lineIntercept(slope)`.
   */
  lineSlope(): number {
    // HOT
    const w = this.sumW;
    if (w < MIN_LINE_SAMPLES) return -1;
    const meanX = this.sumX / w;
    const varX = this.sumXX / w - meanX * meanX;
    if (!(varX >= MIN_LINE_SPREAD * MIN_LINE_SPREAD * meanX * meanX)) return -1;
    const slope = (this.sumXY / w - meanX * (this.sumY / w)) / varX;
    if (!(slope > 0 && slope < Infinity)) return -1;
    return this.sumY / w - slope * meanX >= 0 ? slope : -1;
  }

  /** The line's intercept (y at x = 0) for a slope `lineSlope` returned. */
  lineIntercept(slope: number): number {
    // HOT
    return (this.sumY - slope * this.sumX) / this.sumW;
  }

  /**
   * y per unit of x as the samples determine it: the line's slope once there is a line
   * (`lineSlope`), else the ratio through the origin (`value`); -1 before the first sample.
   */
  perUnit(): number {
    // HOT
    const slope = this.lineSlope();
    return slope > 0 ? slope : this.value();
  }

  /** y at x = 0 that goes with `perUnit`: the line's intercept, 0 while there is no line. */
  base(): number {
    // HOT
    const slope = this.lineSlope();
    return slope > 0 ? this.lineIntercept(slope) : 0;
  }

  /** Forgets every sample (the node is re-probed from a fair start). */
  reset(): void {
    ratioSamples.count++;
    this.sumY = 0;
    this.sumX = 0;
    this.sumW = 0;
    this.sumXX = 0;
    this.sumXY = 0;
    this.updatedMs = 0;
  }
}
