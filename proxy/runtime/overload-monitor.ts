/**
 * Watches Sluice's own health — event-loop delay and V8 heap use — on a timer, and raises the
 * `shedding` flag while they are past their thresholds, so that new requests get a fast 503 with
 * Retry-After instead of every request slowing down or the process running out of memory. The
 * request path only reads the flag (one property load); it never measures anything itself.
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import type { OverloadConfig } from '../../config/types.js';
import { errorBody, Errors } from '../lifecycle/errors.js';
import { nowMs } from '../lifecycle/clock.js';
import { retryAfterHeaders } from '../ratelimit/rate-limit-headers.js';
import type { LoadShedder } from '../server/load-shedder.js';
import type { Logger } from './logger.js';

/** Resolution of the event-loop delay histogram, ms (the delay is measured beyond it). */
const RESOLUTION_MS = 10;
/** Consecutive samples over a threshold before shedding starts: one long pause is not overload. */
const ENTER_SAMPLES = 2;

/**
 * The overload monitor: one per process, started with the server and reconfigured on reload.
 * Samples every `sample_interval_ms`; starts shedding after two consecutive samples over a
 * threshold (event-loop delay p99, or heap used as a share of V8's heap limit), and stops once it
 * shed for at least `min_shed_ms` and a sample is below `recover_ratio` × every threshold.
 */
export class OverloadMonitor implements LoadShedder {
  shedding = false;
  replyHeaders: readonly string[] = [];
  replyBody = '';
  shed = 0;
  /** Times shedding started. */
  episodes = 0;
  /** Event-loop delay p99 beyond the timer resolution over the last sample, ms. */
  delayMs = 0;
  /** V8 heap used over the heap limit at the last sample, percent. */
  heapPercent = 0;
  private config: OverloadConfig;
  private readonly log: Logger;
  private histogram: IntervalHistogram | null = null;
  private timer: NodeJS.Timeout | null = null;
  private over = 0;
  private sinceMs = 0;

  constructor(config: OverloadConfig, log: Logger) {
    this.config = config;
    this.log = log;
  }

  /** True when `config` enables at least one signal. */
  static enabled(config: OverloadConfig): boolean {
    return config.event_loop_delay_ms > 0 || config.heap_used_percent > 0;
  }

  /** Starts sampling (the timer does not keep the process alive). */
  start(): void {
    if (this.timer !== null) return;
    this.histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
    this.histogram.enable();
    this.timer = setInterval(onSample, this.config.sample_interval_ms, this);
    this.timer.unref();
  }

  /** Applies new thresholds (reload); a new sampling interval takes effect at once. */
  configure(config: OverloadConfig): void {
    const restart = config.sample_interval_ms !== this.config.sample_interval_ms;
    this.config = config;
    if (this.shedding) this.buildReply(this.reason());
    if (restart && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = setInterval(onSample, config.sample_interval_ms, this);
      this.timer.unref();
    }
  }

  /** Takes one sample and moves the flag. Called by the timer; public for tests. */
  sample(): void {
    const c = this.config;
    const h = this.histogram;
    if (h !== null) {
      const p99 = h.count > 0 ? h.percentile(99) / 1e6 : 0;
      this.delayMs = p99 > RESOLUTION_MS ? p99 - RESOLUTION_MS : 0;
      h.reset();
    }
    const heap = getHeapStatistics();
    this.heapPercent = (heap.used_heap_size / heap.heap_size_limit) * 100;
    const delayOver = c.event_loop_delay_ms > 0 && this.delayMs > c.event_loop_delay_ms;
    const heapOver = c.heap_used_percent > 0 && this.heapPercent > c.heap_used_percent;
    const now = nowMs();
    if (!this.shedding) {
      this.over = delayOver || heapOver ? this.over + 1 : 0;
      if (this.over >= ENTER_SAMPLES) this.enter(now);
      return;
    }
    const r = c.recover_ratio;
    const calm =
      (c.event_loop_delay_ms === 0 || this.delayMs < c.event_loop_delay_ms * r) &&
      (c.heap_used_percent === 0 || this.heapPercent < c.heap_used_percent * r);
    if (calm && now - this.sinceMs >= c.min_shed_ms) this.leave(now);
  }

  private enter(now: number): void {
    const reason = this.reason();
    this.buildReply(reason);
    this.shedding = true;
    this.sinceMs = now;
    this.episodes++;
    this.log.warn(`overload: shedding new requests with 503 (${reason})`);
  }

  private leave(now: number): void {
    this.shedding = false;
    this.over = 0;
    this.log.info(
      `overload: over after ${Math.round(now - this.sinceMs)} ms; taking requests again (event-loop delay ${this.delayMs.toFixed(1)} ms, heap ${this.heapPercent.toFixed(1)} %)`,
    );
  }

  private reason(): string {
    const c = this.config;
    const parts: string[] = [];
    if (c.event_loop_delay_ms > 0)
      parts.push(`event-loop delay ${this.delayMs.toFixed(0)} ms, threshold ${c.event_loop_delay_ms} ms`);
    if (c.heap_used_percent > 0)
      parts.push(`heap ${this.heapPercent.toFixed(1)} % of its limit, threshold ${c.heap_used_percent} %`);
    return parts.join('; ');
  }

  private buildReply(reason: string): void {
    const retryAfter = this.config.retry_after_ms;
    this.replyHeaders = ['content-type', 'application/json', ...retryAfterHeaders(retryAfter)];
    this.replyBody = errorBody(
      Errors.proxyOverloaded,
      `Sluice is overloaded (${reason}); retry after ${Math.ceil(retryAfter / 1000)} s.`,
    );
  }

  /** Stops sampling. */
  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.histogram?.disable();
    this.histogram = null;
  }
}

function onSample(m: OverloadMonitor): void {
  m.sample();
}
