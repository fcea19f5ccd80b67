/**
 * Keeps a route's micro-batches inside its latency objective by adjusting the window length and the
 * batch size limit from the batch latency actually observed. It only ever lowers the configured
 * limits and grows back toward them; it never sends or waits for anything itself.
 *
 * The controller (AIMD, one step per observed batch):
 *
 *   ewma = ewma + 0.2 × (latency − ewma)
 *   ewma > 0.8 × target  →  size = max(1, ⌊size × 0.75⌋),  wait = wait × 0.75   (shrink fast)
 *   ewma < 0.5 × target  →  size = min(max, size + 1),     wait = min(max, wait + max/10)  (grow slowly)
 *   otherwise            →  unchanged
 */

/** Weight of a new sample in the moving average. */
const EWMA_ALPHA = 0.2;
/** Above this fraction of the objective the limits shrink. */
const HIGH_WATER = 0.8;
/** Below this fraction of the objective the limits grow back. */
const LOW_WATER = 0.5;
/** Multiplicative decrease factor for size and wait. */
const SHRINK = 0.75;
/** Below this the wait is treated as zero (flush at once). */
const MIN_WAIT_MS = 0.05;

/** The current window limits of one route; read by the micro-batcher on every item. */
export class LatencyController {
  /** Current batch size limit, 1..maxBatchSize. */
  batchSize: number; // items
  /** Current window length, 0..maxWaitMs. */
  waitMs: number; // ms
  /** Moving average of observed batch latency; 0 before the first sample. */
  ewmaMs = 0; // ms
  /** Batches observed. */
  samples = 0;

  constructor(
    private readonly maxBatchSize: number, // items
    private readonly maxWaitMs: number, // ms
    /** The objective; 0 disables the controller (the limits stay at their maxima). */
    private readonly targetLatencyMs: number, // ms
    /** Allowed sizes the limit snaps down to, ascending; empty for any size. */
    private readonly preferredSizes: readonly number[],
  ) {
    this.batchSize = this.snap(maxBatchSize);
    this.waitMs = maxWaitMs;
  }

  /** Records one batch's latency (window open to last first-call answer) and adjusts the limits. */
  observe(latencyMs: number): void {
    this.ewmaMs = this.samples === 0 ? latencyMs : this.ewmaMs + EWMA_ALPHA * (latencyMs - this.ewmaMs);
    this.samples++;
    const target = this.targetLatencyMs;
    if (target <= 0) return;
    if (this.ewmaMs > HIGH_WATER * target) {
      this.batchSize = this.snap(Math.max(1, Math.floor(this.batchSize * SHRINK)));
      const wait = this.waitMs * SHRINK;
      this.waitMs = wait < MIN_WAIT_MS ? 0 : wait;
    } else if (this.ewmaMs < LOW_WATER * target) {
      this.batchSize = this.snapUp(Math.min(this.maxBatchSize, this.batchSize + 1));
      this.waitMs = Math.min(this.maxWaitMs, this.waitMs + this.maxWaitMs / 10);
    }
  }

  /** The largest preferred size ≤ n (n itself without preferred sizes, 1 below the smallest). */
  private snap(n: number): number {
    const sizes = this.preferredSizes;
    if (sizes.length === 0) return n;
    let best = 1;
    for (const s of sizes) if (s <= n) best = s;
    return best;
  }

  /** The smallest preferred size ≥ n, capped at the maximum; n itself without preferred sizes. */
  private snapUp(n: number): number {
    const sizes = this.preferredSizes;
    if (sizes.length === 0) return n;
    for (const s of sizes) if (s >= n) return Math.min(s, this.maxBatchSize);
    return this.snap(this.maxBatchSize);
  }
}
