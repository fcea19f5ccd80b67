/**
 * Keeps one capacity tracker per pool of the running plan and samples them on a timer off the
 * request path; the admin API and the metrics exporter read its latest reports. It reads counters
 * only: it never changes a pool, a node or a plan.
 */
import { nowMs } from '../lifecycle/clock.js';
import { PoolCapacityTracker, type CapacityPoolSource, type PoolCapacityReport } from './pool-capacity.js';

/** Bounds of the sampling interval, ms: fine enough for a short window, cheap for a long one. */
const MIN_SAMPLE_MS = 10; // ms
const MAX_SAMPLE_MS = 100; // ms

/** How to create a `CapacityMonitor`. */
export interface CapacityMonitorOptions {
  /** The pools to track, asked on every sample (the current plan's, via `capacityPoolsOf`). */
  pools: () => readonly CapacityPoolSource[];
  /** Monotonic clock, ms. Default `performance.now()`. */
  clock?: () => number;
}

/**
 * Samples every pool each `min(100, max(10, window_ms ÷ 200))` ms (the shortest window decides).
 * Create it once per process after the first plan, call `start()`, and `close()` at shutdown.
 */
export class CapacityMonitor {
  private readonly source: () => readonly CapacityPoolSource[];
  private readonly clock: () => number;
  private readonly trackers = new Map<string, PoolCapacityTracker>();
  private timer: NodeJS.Timeout | null = null;
  /** Current timer interval, ms. */
  private intervalMs = 0; // ms
  /** Between `start()` and `close()`. */
  private running = false;

  constructor(options: CapacityMonitorOptions) {
    this.source = options.pools;
    this.clock = options.clock ?? nowMs;
  }

  /** Takes a first sample and starts the timer (unref'd: it never keeps the process alive). */
  start(): void {
    this.running = true;
    this.tick();
  }

  /**
   * Samples every pool once: trackers of new pools are created, trackers of removed pools are
   * dropped. Called by the timer; tests with a manual clock call it directly.
   */
  tick(): void {
    const now = this.clock();
    const pools = this.source();
    let sampleMs = MAX_SAMPLE_MS;
    for (const p of pools) {
      let t = this.trackers.get(p.name);
      if (t === undefined) {
        t = new PoolCapacityTracker(p, now);
        this.trackers.set(p.name, t);
      }
      t.sample(p, now);
      if (t.sampleMs < sampleMs) sampleMs = t.sampleMs;
    }
    // Pool names are unique, so more trackers than pools means a reload removed some.
    if (this.trackers.size > pools.length) {
      const keep = new Set(pools.map((p) => p.name));
      for (const name of this.trackers.keys()) if (!keep.has(name)) this.trackers.delete(name);
    }
    if (this.running) this.schedule(Math.max(MIN_SAMPLE_MS, sampleMs));
  }

  private schedule(ms: number): void {
    if (ms === this.intervalMs && this.timer !== null) return;
    if (this.timer !== null) clearInterval(this.timer);
    this.intervalMs = ms;
    this.timer = setInterval(() => this.tick(), ms);
    this.timer.unref();
  }

  /** The latest report of every pool of the current plan, in config order. */
  reports(): PoolCapacityReport[] {
    const out: PoolCapacityReport[] = [];
    for (const p of this.source()) {
      const t = this.trackers.get(p.name);
      if (t !== undefined) out.push(t.latest);
    }
    return out;
  }

  /** Stops the timer; `reports()` keeps answering with the last figures. */
  close(): void {
    this.running = false;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
