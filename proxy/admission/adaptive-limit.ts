/**
 * Adaptive concurrency: a gradient limit on requests in flight, in the spirit of Netflix's
 * concurrency-limits "Gradient2". It compares recent latency with its long-run minimum: near the
 * minimum the fleet is not queueing internally and the limit grows; above it, the limit shrinks in
 * proportion. It only computes a number; the admission controller enforces it.
 *
 *   short    = EWMA of latency over ~`shortWindow` samples                         (ms)
 *   minimum  = lowest `short` seen, drifting up towards `short` by 1/`longWindow` per sample
 *   gradient = clamp(tolerance × minimum / short, 0.5, 1)
 *   target   = limit × gradient + √limit            (√limit: room to probe for more)
 *   limit    = clamp(limit × (1 − smoothing) + target × smoothing, minLimit, maxLimit)
 *
 * The limit does not grow while fewer than half of it is in use (nothing learned about a larger one).
 */

/** Options of `AdaptiveLimit` (YAML: `admission.adaptive`). */
export interface AdaptiveLimitOptions {
  /** Lower bound, requests. Default 1. */
  minLimit?: number;
  /** Upper bound, requests. Default: the pool's static capacity (max in flight per node × nodes). */
  maxLimit?: number;
  /** Starting limit, requests. Default `maxLimit`. */
  initialLimit?: number;
  /** Latency up to `tolerance ×` the minimum counts as "at the minimum" (no decrease). Default 1.5. */
  tolerance?: number;
  /** Weight of each new target in the limit, 0..1. Default 0.2. */
  smoothing?: number;
  /** Samples in the short latency average. Default 10. */
  shortWindow?: number;
  /** Samples over which the minimum follows a lasting latency change. Default 600. */
  longWindow?: number;
}

/** The gradient limit. Feed it `observe(latencyMs, inFlight)`; read `limit` (integer). */
export class AdaptiveLimit {
  /** Lower bound, requests. */
  readonly minLimit: number;
  /** Upper bound, requests; the controller keeps it equal to the static capacity unless configured. */
  maxLimit: number;
  /** Tolerated latency ratio over the minimum. */
  readonly tolerance: number;
  /** Weight of a new target, 0..1. */
  readonly smoothing: number;
  /** Unrounded current limit, requests. */
  estimate: number;
  /** Short-window latency average, ms; 0 before the first sample. */
  shortLatencyMs = 0;
  /** Long-run minimum of the short average, ms; Infinity before the first sample. */
  minLatencyMs = Infinity;
  private readonly shortAlpha: number;
  private readonly longAlpha: number;

  constructor(options: AdaptiveLimitOptions & { maxLimit: number }) {
    this.minLimit = Math.max(1, options.minLimit ?? 1);
    this.maxLimit = Math.max(this.minLimit, options.maxLimit);
    this.tolerance = options.tolerance ?? 1.5;
    this.smoothing = options.smoothing ?? 0.2;
    this.shortAlpha = 2 / ((options.shortWindow ?? 10) + 1);
    this.longAlpha = 1 / (options.longWindow ?? 600);
    this.estimate = clamp(options.initialLimit ?? this.maxLimit, this.minLimit, this.maxLimit);
    if (!(this.tolerance >= 1)) throw new Error('adaptive.tolerance must be >= 1');
    if (!(this.smoothing > 0 && this.smoothing <= 1)) throw new Error('adaptive.smoothing must be in (0, 1]');
  }

  /** The current limit, a whole number of requests within [minLimit, maxLimit]. */
  get limit(): number {
    return Math.max(this.minLimit, Math.floor(this.estimate));
  }

  /**
   * Feeds one completed request's latency (ms) and the number in flight when it completed
   * (including itself); returns the new limit.
   */
  observe(latencyMs: number, inFlight: number): number {
    // HOT
    if (!(latencyMs >= 0)) return this.limit;
    const x = latencyMs > 0 ? latencyMs : 1e-3;
    this.shortLatencyMs =
      this.shortLatencyMs === 0 ? x : this.shortLatencyMs + (x - this.shortLatencyMs) * this.shortAlpha;
    const short = this.shortLatencyMs;
    if (short < this.minLatencyMs) this.minLatencyMs = short;
    else this.minLatencyMs += (short - this.minLatencyMs) * this.longAlpha;
    const gradient = clamp((this.tolerance * this.minLatencyMs) / short, 0.5, 1);
    const limit = this.estimate;
    if (gradient >= 1 && inFlight < limit / 2) return this.limit;
    const target = limit * gradient + Math.sqrt(limit);
    this.estimate = clamp(
      limit * (1 - this.smoothing) + target * this.smoothing,
      this.minLimit,
      this.maxLimit,
    );
    return this.limit;
  }
}

function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : v > hi ? hi : v;
}
