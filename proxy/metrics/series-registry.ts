/**
 * Every histogram series of the process: one per route × pool × node and one per configured tenant,
 * kept across reloads by their labels (a route that keeps its name keeps its history). Plans look
 * series up here when they are compiled; requests hold direct references. A timer closes the
 * window slices; series a reload removed are freed at once (a request still running on the old
 * plan records into a sink).
 */
import { MetricSeries, NO_NODE, type SeriesLabels } from './metric-series.js';
import type { WindowShape } from './windowed-histogram.js';

/** The default window: the last 60 s in 10 s slices. */
export const DEFAULT_WINDOW: WindowShape = Object.freeze({ slices: 6, sliceMs: 10_000 });

export class SeriesRegistry {
  private shapeValue: WindowShape = DEFAULT_WINDOW;
  private readonly routeSeries = new Map<string, MetricSeries>();
  private readonly tenantSeries = new Map<string, MetricSeries>();
  private timer: NodeJS.Timeout | null = null;

  get shape(): WindowShape {
    return this.shapeValue;
  }

  /** Sets the window; only before the first series exists (the window is a restart setting). */
  configure(shape: WindowShape): void {
    if (this.routeSeries.size > 0 || this.tenantSeries.size > 0) return;
    this.shapeValue = Object.freeze({ ...shape });
  }

  /** The series of `route` × `pool` × `node` (node id, or NO_NODE), created on first use (compile time). */
  route(route: string, pool: string, node: string): MetricSeries {
    const key = `${route}\n${pool}\n${node}`;
    let s = this.routeSeries.get(key);
    if (s === undefined) {
      s = new MetricSeries({ route, pool, node, tenant: '' }, this.shapeValue);
      this.routeSeries.set(key, s);
    }
    return s;
  }

  /** The series of a configured tenant, created on first use (compile time). */
  tenant(name: string): MetricSeries {
    let s = this.tenantSeries.get(name);
    if (s === undefined) {
      s = new MetricSeries({ route: '', pool: '', node: '', tenant: name }, this.shapeValue);
      this.tenantSeries.set(name, s);
    }
    return s;
  }

  /** The series of `route` × `pool` × `node` if it exists (a worker's report, merged). */
  findRoute(route: string, pool: string, node: string): MetricSeries | undefined {
    return this.routeSeries.get(`${route}\n${pool}\n${node}`);
  }

  /** The series of tenant `name` if it exists. */
  findTenant(name: string): MetricSeries | undefined {
    return this.tenantSeries.get(name);
  }

  /** Route series, in creation order. */
  routes(): IterableIterator<MetricSeries> {
    return this.routeSeries.values();
  }

  /** Tenant series, in creation order. */
  tenants(): IterableIterator<MetricSeries> {
    return this.tenantSeries.values();
  }

  /** Frees every series that `keep` does not hold (after a plan was compiled). */
  retain(keep: ReadonlySet<MetricSeries>): void {
    for (const map of [this.routeSeries, this.tenantSeries]) {
      for (const [key, s] of map) {
        if (keep.has(s)) continue;
        map.delete(key);
        s.destroy();
      }
    }
  }

  /** Closes the current window slice of every series. */
  rotate(): void {
    for (const s of this.routeSeries.values()) s.rotate();
    for (const s of this.tenantSeries.values()) s.rotate();
  }

  /** Starts closing slices every `sliceMs` (the timer does not keep the process alive). */
  start(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => this.rotate(), this.shapeValue.sliceMs);
    this.timer.unref();
  }

  /** Stops the slice timer and frees every series (shutdown). */
  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.retain(new Set());
  }
}

/** Labels of a route series (for readers that group by route, pool or node). */
export function isRouteSeries(l: SeriesLabels): boolean {
  return l.tenant === '';
}

export { NO_NODE };
