/**
 * `GET /admin/stats`: percentiles (p50, p90, p99, p99.9, max) of every recorded quantity over the
 * sliding window and since start, per route, per node, per tenant, and on request per route × pool ×
 * node; refusals by reason; tenants' usage against their limits; process gauges. Built on demand
 * from the series (merging HDR histograms off the request path); latencies in milliseconds. `all`
 * merges every route.
 */
import type { Histogram } from 'hdr-histogram-js';
import type { SluiceConfig, TenantLimitsConfig } from '../../config/types.js';
import type { EventLoopMonitor } from '../metrics/event-loop-monitor.js';
import type { HdrScale } from '../metrics/hdr.js';
import type { MetricSeries } from '../metrics/metric-series.js';
import { REFUSALS } from '../metrics/refusals.js';
import type { SeriesRegistry } from '../metrics/series-registry.js';
import { METRICS, Metric, type MetricDef } from '../metrics/series-metrics.js';
import { scratchHistogram, summarize, type PercentileSummary } from '../metrics/windowed-histogram.js';

/** What the view reads. */
export interface StatsViewSource {
  series: SeriesRegistry;
  refused: Float64Array;
  config: SluiceConfig;
  configVersion: number;
  inFlight: number;
  draining: boolean;
  eventLoop: EventLoopMonitor | null;
  /** Process start, Unix ms. */
  startedAtMs: number;
  /** Include the route × pool × node rows. */
  detail: boolean;
}

/** Percentiles of one quantity in the window and since start, in `unit`. */
interface QuantityView {
  unit: string;
  window: PercentileSummary;
  total: PercentileSummary;
}

type Quantities = Record<string, QuantityView>;

/** Merges series into two scratch histograms per scale; freed by `close`. */
class Merger {
  private readonly acc = new Map<HdrScale, Histogram>();

  /** Percentiles of `metric` over `members`, window and total, converted for display. */
  quantity(def: MetricDef, members: readonly MetricSeries[]): QuantityView | null {
    const hs = members.map((m) => m.peek(def.id)).filter((h) => h !== null);
    if (hs.length === 0) return null;
    const acc = this.scratch(def.scale);
    acc.reset();
    for (const h of hs) h.addWindowTo(acc);
    const window = display(summarize(acc, def.scale), def);
    acc.reset();
    for (const h of hs) h.addTotalTo(acc);
    const total = display(summarize(acc, def.scale), def);
    if (total.count === 0) return null;
    return { unit: def.unit === 'seconds' ? 'ms' : def.unit, window, total };
  }

  quantities(members: readonly MetricSeries[]): Quantities {
    const out: Quantities = {};
    for (const def of METRICS) {
      const q = this.quantity(def, members);
      if (q !== null) out[def.key] = q;
    }
    return out;
  }

  private scratch(scale: HdrScale): Histogram {
    let h = this.acc.get(scale);
    if (h === undefined) {
      h = scratchHistogram(scale);
      this.acc.set(scale, h);
    }
    return h;
  }

  close(): void {
    for (const h of this.acc.values()) h.destroy();
    this.acc.clear();
  }
}

/** Latencies in ms with 3 decimals; counts as they are. */
function display(p: PercentileSummary, def: MetricDef): PercentileSummary {
  const k = def.unit === 'seconds' ? 1000 : 1;
  const r = (v: number): number => Math.round(v * k * 1000) / 1000;
  return {
    count: p.count,
    p50: r(p.p50),
    p90: r(p.p90),
    p99: r(p.p99),
    p999: r(p.p999),
    max: r(p.max),
    mean: r(p.mean),
  };
}

function groupBy(
  series: Iterable<MetricSeries>,
  key: (s: MetricSeries) => string,
): Map<string, MetricSeries[]> {
  const m = new Map<string, MetricSeries[]>();
  for (const s of series) {
    const k = key(s);
    const g = m.get(k);
    if (g === undefined) m.set(k, [s]);
    else g.push(s);
  }
  return m;
}

function refusals(counts: Float64Array): Record<string, number> {
  const out: Record<string, number> = {};
  REFUSALS.forEach((r, i) => {
    if (counts[i]! > 0) out[r.reason] = counts[i]!;
  });
  return out;
}

function limitsOf(config: SluiceConfig, tenant: string): TenantLimitsConfig | null {
  const t = config.tenants?.find((x) => x.name === tenant);
  return t?.limits ?? config.rate_limits.defaults ?? null;
}

/** The `/admin/stats` body. */
export function statsView(src: StatsViewSource): unknown {
  const merger = new Merger();
  try {
    const routeSeries = [...src.series.routes()];
    const windowSeconds = (src.series.shape.slices * src.series.shape.sliceMs) / 1000;
    const routes = [...groupBy(routeSeries, (s) => s.labels.route)].map(([route, members]) => ({
      route,
      ...merger.quantities(members),
    }));
    const nodes = [...groupBy(routeSeries, (s) => `${s.labels.pool}\n${s.labels.node}`)].map(
      ([, members]) => ({
        pool: members[0]!.labels.pool,
        node: members[0]!.labels.node,
        ...merger.quantities(members),
      }),
    );
    const tenants = [...src.series.tenants()].map((s) => {
      const q = merger.quantities([s]);
      const limits = limitsOf(src.config, s.labels.tenant);
      const minutes = windowSeconds / 60;
      const dur = s.peek(Metric.duration);
      const tok = q['tokens'];
      return {
        tenant: s.labels.tenant,
        ...q,
        refusals: refusals(s.refused),
        usage: {
          requests_per_minute: dur === null ? 0 : round(dur.windowCount / minutes),
          tokens_per_minute: tok === undefined ? 0 : round((tok.window.mean * tok.window.count) / minutes),
        },
        limits: {
          requests_per_minute: limits?.requests_per_minute ?? null,
          tokens_per_minute: limits?.tokens_per_minute ?? null,
          max_concurrent: limits?.max_concurrent ?? null,
        },
      };
    });
    const mem = process.memoryUsage();
    const eld = src.eventLoop?.window() ?? null;
    return {
      generated_at: new Date().toISOString(),
      uptime_seconds: Math.round((Date.now() - src.startedAtMs) / 1000),
      window_seconds: windowSeconds,
      config_version: src.configVersion,
      draining: src.draining,
      in_flight: src.inFlight,
      process: {
        heap_used_bytes: mem.heapUsed,
        heap_total_bytes: mem.heapTotal,
        rss_bytes: mem.rss,
        event_loop_delay_ms:
          eld === null ? null : { p50: ms(eld.p50), p99: ms(eld.p99), max: ms(eld.max), count: eld.count },
      },
      refusals: refusals(src.refused),
      all: merger.quantities(routeSeries),
      routes,
      nodes,
      tenants,
      ...(src.detail
        ? {
            series: routeSeries.map((s) => ({
              route: s.labels.route,
              pool: s.labels.pool,
              node: s.labels.node,
              ...merger.quantities([s]),
            })),
          }
        : {}),
    };
  } finally {
    merger.close();
  }
}

function round(v: number): number {
  return Math.round(v * 100) / 100;
}

function ms(s: number): number {
  return Math.round(s * 1e6) / 1000;
}
