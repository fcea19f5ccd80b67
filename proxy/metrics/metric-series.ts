/**
 * The histograms of one series: one route × pool × node, or one tenant. Each quantity's histogram
 * is created on its first value (a route that never streams holds no TTFT histogram), then never
 * resized; recording allocates nothing. Counters of refusals by reason ride along for tenants.
 */
import { METRIC_COUNT, METRICS, type Metric } from './series-metrics.js';
import { REFUSAL_COUNT } from './refusals.js';
import { WindowedHistogram, type HistogramDelta, type WindowShape } from './windowed-histogram.js';

/** What a worker thread recorded in one series since its last report (see `MetricSeries.takeDelta`). */
export interface SeriesDelta {
  labels: SeriesLabels;
  refused: number[];
  /** By metric index; null where nothing was recorded. */
  histograms: (HistogramDelta | null)[];
}

/** Labels of a series: route, pool and node, or tenant (the others empty). */
export interface SeriesLabels {
  readonly route: string;
  readonly pool: string;
  /** Node id (its base URL), or `none` for requests no single node answered. */
  readonly node: string;
  readonly tenant: string;
}

/** The `node` label of requests that no single node answered (refused, micro-batched). */
export const NO_NODE = 'none';

export class MetricSeries {
  readonly labels: SeriesLabels;
  /** Refusals by reason (index: `Refusal`). */
  readonly refused: Float64Array;
  private readonly shape: WindowShape;
  private readonly h: (WindowedHistogram | null)[];

  constructor(labels: SeriesLabels, shape: WindowShape) {
    this.labels = labels;
    this.shape = shape;
    this.refused = new Float64Array(REFUSAL_COUNT);
    this.h = [];
    for (let i = 0; i < METRIC_COUNT; i++) this.h.push(null);
  }

  /** The histogram of `metric`, created on first use. */
  histogram(metric: Metric): WindowedHistogram {
    let w = this.h[metric];
    if (w === null || w === undefined) {
      const def = METRICS[metric]!;
      w = new WindowedHistogram(def.scale, def.buckets, this.shape);
      this.h[metric] = w;
    }
    return w;
  }

  /** The histogram of `metric` if anything was recorded in it, else null (readers). */
  peek(metric: Metric): WindowedHistogram | null {
    return this.h[metric] ?? null;
  }

  /** Records a duration in milliseconds. */
  recordMs(metric: Metric, ms: number): void {
    // HOT
    this.histogram(metric).record(ms * 1000);
  }

  /** Records a count (tokens, items). */
  recordCount(metric: Metric, n: number): void {
    this.histogram(metric).record(n);
  }

  /** A worker thread's side: what was recorded since the last call, or null; then forgets it. */
  takeDelta(): SeriesDelta | null {
    let any = false;
    const histograms: (HistogramDelta | null)[] = [];
    for (const w of this.h) {
      const d = w?.takeDelta() ?? null;
      if (d !== null) any = true;
      histograms.push(d);
    }
    const refused = Array.from(this.refused);
    if (refused.some((n) => n !== 0)) any = true;
    if (!any) return null;
    this.refused.fill(0);
    return { labels: this.labels, refused, histograms };
  }

  /** The main thread's side: adds what a worker recorded in the series of the same labels. */
  absorb(d: SeriesDelta): void {
    for (let i = 0; i < d.refused.length && i < this.refused.length; i++) this.refused[i]! += d.refused[i]!;
    for (let m = 0; m < d.histograms.length && m < METRIC_COUNT; m++) {
      const h = d.histograms[m];
      if (h !== null && h !== undefined) this.histogram(m as Metric).absorb(h);
    }
  }

  /** Closes the current window slice of every histogram. */
  rotate(): void {
    for (const w of this.h) w?.rotate();
  }

  /** Frees the histograms (the series left the config). */
  destroy(): void {
    for (const w of this.h) w?.destroy();
  }
}
