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

/**
 * Where a limit keeps its three numbers (estimate, short average, minimum) when the threads of
 * `server.workers` share one: Float64 cells in their shared table, changed under its lock. Every
 * thread then feeds the one limit its own requests' latencies and enforces the same number.
 */
export interface SharedAdaptiveState {
  readonly floats: Float64Array;
  /** Cells of the estimate, the short average and the minimum. */
  readonly estimate: number;
  readonly short: number;
  readonly min: number;
  /** True when the limit is to start the cells afresh (this thread made them, or it is the main thread). */
  readonly fresh: boolean;
  lock(): void;
  unlock(): void;
}

/** Cells of a limit of its own (one thread). */
const NO_LOCK = (): void => undefined;

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
  private readonly shortAlpha: number;
  private readonly longAlpha: number;
  /** The state's cells: this limit's own, or the threads' shared ones. */
  private readonly f: Float64Array;
  private readonly iEstimate: number;
  private readonly iShort: number;
  private readonly iMin: number;
  private readonly lock: () => void;
  private readonly unlock: () => void;

  /** `shared`: the threads' cells for this limit (see `SharedAdaptiveState`); default its own. */
  constructor(
    options: AdaptiveLimitOptions & { maxLimit: number },
    shared: SharedAdaptiveState | null = null,
  ) {
    this.minLimit = Math.max(1, options.minLimit ?? 1);
    this.maxLimit = Math.max(this.minLimit, options.maxLimit);
    this.tolerance = options.tolerance ?? 1.5;
    this.smoothing = options.smoothing ?? 0.2;
    this.shortAlpha = 2 / ((options.shortWindow ?? 10) + 1);
    this.longAlpha = 1 / (options.longWindow ?? 600);
    if (!(this.tolerance >= 1)) throw new Error('adaptive.tolerance must be >= 1');
    if (!(this.smoothing > 0 && this.smoothing <= 1)) throw new Error('adaptive.smoothing must be in (0, 1]');
    const initial = clamp(options.initialLimit ?? this.maxLimit, this.minLimit, this.maxLimit);
    if (shared === null) {
      this.f = new Float64Array(3);
      this.iEstimate = 0;
      this.iShort = 1;
      this.iMin = 2;
      this.lock = NO_LOCK;
      this.unlock = NO_LOCK;
    } else {
      this.f = shared.floats;
      this.iEstimate = shared.estimate;
      this.iShort = shared.short;
      this.iMin = shared.min;
      this.lock = () => shared.lock();
      this.unlock = () => shared.unlock();
    }
    if (shared === null || shared.fresh) {
      this.lock();
      this.f[this.iEstimate] = initial;
      this.f[this.iShort] = 0;
      this.f[this.iMin] = Infinity;
      this.unlock();
    } else {
      // Joined: within this limit's bounds whatever the thread that started it had.
      this.lock();
      this.f[this.iEstimate] = clamp(this.f[this.iEstimate]!, this.minLimit, this.maxLimit);
      this.unlock();
    }
  }

  /** Unrounded current limit, requests. */
  get estimate(): number {
    return this.f[this.iEstimate]!;
  }

  /** Lowers the estimate to `max` if it is above (the ceiling moved down). */
  capEstimate(max: number): void {
    this.lock();
    if (this.f[this.iEstimate]! > max) this.f[this.iEstimate] = max;
    this.unlock();
  }

  /** Short-window latency average, ms; 0 before the first sample. */
  get shortLatencyMs(): number {
    return this.f[this.iShort]!;
  }

  /** Long-run minimum of the short average, ms; Infinity before the first sample. */
  get minLatencyMs(): number {
    return this.f[this.iMin]!;
  }

  /** The current limit, a whole number of requests within [minLimit, maxLimit]. */
  get limit(): number {
    // HOT: with threads, a read of a cell another thread may be writing: an aligned 8-byte load,
    // which x86-64 and ARMv8 make whole; the value is one estimate or the next.
    return Math.max(this.minLimit, Math.floor(this.f[this.iEstimate]!));
  }

  /**
   * Feeds one completed request's latency (ms) and the number in flight when it completed
   * (including itself); returns the new limit.
   */
  observe(latencyMs: number, inFlight: number): number {
    // HOT
    if (!(latencyMs >= 0)) return this.limit;
    const x = latencyMs > 0 ? latencyMs : 1e-3;
    const f = this.f;
    this.lock();
    let short = f[this.iShort]!;
    short = short === 0 ? x : short + (x - short) * this.shortAlpha;
    f[this.iShort] = short;
    let min = f[this.iMin]!;
    if (short < min) min = short;
    else min += (short - min) * this.longAlpha;
    f[this.iMin] = min;
    const gradient = clamp((this.tolerance * min) / short, 0.5, 1);
    const limit = f[this.iEstimate]!;
    if (!(gradient >= 1 && inFlight < limit / 2)) {
      const target = limit * gradient + Math.sqrt(limit);
      f[this.iEstimate] = clamp(
        limit * (1 - this.smoothing) + target * this.smoothing,
        this.minLimit,
        this.maxLimit,
      );
    }
    this.unlock();
    return this.limit;
  }
}

function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : v > hi ? hi : v;
}
