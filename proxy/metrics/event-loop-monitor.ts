/**
 * Measures how late the event loop runs timers (event-loop delay): a timer due every 50 ms records
 * how much later than due it fired, into a windowed histogram, so that `/metrics` and `/admin/stats`
 * show the p99 over the last window. A late timer means every request waited that long too.
 */
import { nowMs } from '../lifecycle/clock.js';
import { LATENCY_US } from './hdr.js';
import {
  scratchHistogram,
  summarize,
  WindowedHistogram,
  type PercentileSummary,
  type WindowShape,
} from './windowed-histogram.js';

/** Sampling period, ms. */
const PERIOD_MS = 50;

export class EventLoopMonitor {
  private readonly delay: WindowedHistogram;
  private timer: NodeJS.Timeout | null = null;
  private lastMs = 0;
  private ticks = 0;
  private readonly ticksPerSlice: number;

  constructor(shape: WindowShape) {
    this.delay = new WindowedHistogram(LATENCY_US, [], shape);
    this.ticksPerSlice = Math.max(1, Math.round(shape.sliceMs / PERIOD_MS));
  }

  /** Starts sampling (the timer does not keep the process alive). */
  start(): void {
    if (this.timer !== null) return;
    this.lastMs = nowMs();
    this.timer = setInterval(() => this.tick(), PERIOD_MS);
    this.timer.unref();
  }

  private tick(): void {
    const now = nowMs();
    const late = now - this.lastMs - PERIOD_MS;
    this.lastMs = now;
    this.delay.record(late > 0 ? late * 1000 : 1);
    if (++this.ticks % this.ticksPerSlice === 0) this.delay.rotate();
  }

  /** Event-loop delay over the window, in seconds. */
  window(): PercentileSummary {
    const h = scratchHistogram(LATENCY_US);
    try {
      this.delay.addWindowTo(h);
      return summarize(h, LATENCY_US);
    } finally {
      h.destroy();
    }
  }

  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.delay.destroy();
  }
}
