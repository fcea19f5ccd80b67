/**
 * Metrics across the threads of `server.workers`: a worker takes what it counted and recorded since
 * its last report (`takeStatsDelta`: counters as differences, histograms as the values recorded,
 * gauges as they stand) and posts it; the main thread adds it to its own counters and histograms
 * (`absorbStatsDelta`), so /metrics, /admin/stats, /admin/histograms, the status page and the
 * capacity estimate read every thread's traffic. A worker keeps no windows of its own: its
 * histograms are emptied by each report and the main thread's windows hold the merged values.
 */
import type { PoolState } from '../pool/pool-state.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';
import type { PluginMetricsRegistry } from '../plugin/plugin-metrics.js';
import type { NodeRegistry } from '../upstream/node-registry.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { SeriesDelta } from './metric-series.js';
import type { RouteStats, StatsRegistry } from './stats.js';

/** One route's (or mirror's) counters and summaries since the last report. */
export interface RouteDelta {
  route: string;
  byStatus: [number, number][];
  aborted: number;
  duration: { hdr: string; sumSeconds: number } | null;
  ttfb: { hdr: string; sumSeconds: number } | null;
  ttft: { hdr: string; sumSeconds: number } | null;
}

/** What a worker posts each report. */
export interface StatsDelta {
  routes: RouteDelta[];
  mirrors: RouteDelta[];
  rejected: [string, number][];
  abortedUnrouted: number;
  refused: number[];
  series: SeriesDelta[];
  /** Listener counters since the last report, and its open connections now. */
  listeners: {
    name: string;
    connections: number;
    refused: number;
    headerTimeouts: number;
    bodyTimeouts: number;
    writeTimeouts: number;
    bufferedHighWater: number;
  }[];
  /** Nodes' attempts and failures since the last report, by pool and node id. */
  nodes: { pool: string; id: string; attempts: number; failures: number }[];
  /** Pools' counters since the last report. */
  pools: {
    name: string;
    counts: number[];
    healthEvents: [string, number][];
    /** Admission decisions since the last report, by `AdmissionCounters` key. */
    admission: [string, number][];
  }[];
  /** Rate-limit decisions since the last report, by outcome (`RateLimiter.counters` keys). */
  limiter: [string, number][];
  /** Plugin metrics: counters since the last report, gauges as they stand. */
  plugins: {
    name: string;
    type: 'counter' | 'gauge';
    help: string;
    labelNames: string[];
    series: [string[], number][];
  }[];
  /** Requests the worker finished serving since the last report. */
  served: number;
  /** Gauges as they stand: requests in flight, tenant concurrency slots held, tokens reserved. */
  inFlight: number;
  limiterConcurrent: number;
  limiterReserved: number;
  /** Connections still served with an older certificate, by TLS listener. */
  tlsRetired: [string, number][];
}

/** Gauges the main thread keeps per worker (the latest report of each). */
export interface RemoteGauges {
  inFlight: number;
  limiterConcurrent: number;
  limiterReserved: number;
  /** Open connections per listener. */
  connections: Map<string, number>;
  /** Connections still served with an older certificate, by TLS listener. */
  tlsRetired: Map<string, number>;
}

/** PoolState counters reported, in this order. */
const POOL_COUNTS = ['noNode', 'fellBack', 'retries', 'hedges', 'hedgeWins'] as const;

/** What a worker reports from. */
export interface DeltaSource {
  stats: StatsRegistry;
  registry: NodeRegistry;
  pools: Iterable<PoolState>;
  limiter: RateLimiter | null;
  plugins: PluginMetricsRegistry;
  /** Connections still served with an older certificate, by TLS listener. */
  tlsRetired: [string, number][];
}

/** The worker's record of what it already reported of counters it must not reset. */
export class DeltaMemo {
  private readonly last = new WeakMap<object, number[]>();
  private readonly lastEvents = new WeakMap<PoolState, Map<string, number>>();

  /** `now` minus what was reported of `owner` before, remembered as reported. */
  diff(owner: object, now: number[]): number[] {
    const before = this.last.get(owner);
    this.last.set(owner, now);
    return before === undefined ? now : now.map((v, i) => v - (before[i] ?? 0));
  }

  events(pool: PoolState): [string, number][] {
    const before = this.lastEvents.get(pool) ?? new Map<string, number>();
    const out: [string, number][] = [];
    for (const [k, v] of pool.healthEvents) {
      const d = v - (before.get(k) ?? 0);
      if (d !== 0) out.push([k, d]);
    }
    this.lastEvents.set(pool, new Map(pool.healthEvents));
    return out;
  }
}

function takeRoute(r: RouteStats): RouteDelta | null {
  const d: RouteDelta = {
    route: r.route,
    byStatus: [...r.byStatus],
    aborted: r.aborted,
    duration: r.duration.takeDelta(),
    ttfb: r.ttfb.takeDelta(),
    ttft: r.ttft.takeDelta(),
  };
  r.byStatus.clear();
  r.aborted = 0;
  const empty =
    d.byStatus.length === 0 && d.aborted === 0 && d.duration === null && d.ttfb === null && d.ttft === null;
  return empty ? null : d;
}

/** A worker's report: everything since the last one (its metric containers are emptied). */
export function takeStatsDelta(src: DeltaSource, memo: DeltaMemo): StatsDelta {
  const s = src.stats;
  const routes: RouteDelta[] = [];
  for (const r of s.routes.values()) {
    const d = takeRoute(r);
    if (d !== null) routes.push(d);
  }
  const mirrors: RouteDelta[] = [];
  for (const r of s.mirrors.values()) {
    const d = takeRoute(r);
    if (d !== null) mirrors.push(d);
  }
  const rejected = [...s.rejected];
  s.rejected.clear();
  const abortedUnrouted = s.abortedUnrouted;
  s.abortedUnrouted = 0;
  const refused = Array.from(s.refused);
  s.refused.fill(0);
  const series: SeriesDelta[] = [];
  for (const it of [s.series.routes(), s.series.tenants()])
    for (const m of it) {
      const d = m.takeDelta();
      if (d !== null) series.push(d);
    }
  const listeners: StatsDelta['listeners'] = [];
  for (const l of s.listeners.values()) {
    const [refusedN, headerTimeouts, bodyTimeouts, writeTimeouts] = memo.diff(l, [
      l.refused,
      l.headerTimeouts,
      l.bodyTimeouts,
      l.writeTimeouts,
    ]);
    listeners.push({
      name: l.listener,
      connections: l.connections,
      refused: refusedN!,
      headerTimeouts: headerTimeouts!,
      bodyTimeouts: bodyTimeouts!,
      writeTimeouts: writeTimeouts!,
      bufferedHighWater: l.bufferedHighWater,
    });
  }
  const nodes: StatsDelta['nodes'] = [];
  for (const n of src.registry.all()) {
    const [attempts, failures] = memo.diff(n, [n.attempts, n.failures]);
    if (attempts !== 0 || failures !== 0)
      nodes.push({ pool: n.poolName, id: n.id, attempts: attempts!, failures: failures! });
  }
  const pools: StatsDelta['pools'] = [];
  for (const p of src.pools) {
    const counts = memo.diff(p, [
      ...POOL_COUNTS.map((k) => p[k]),
      p.retryBudget.granted,
      p.retryBudget.refused,
    ]);
    const healthEvents = memo.events(p);
    let admission: [string, number][] = [];
    const ac = p.admission?.counters;
    if (ac !== undefined) {
      const keys = Object.keys(ac) as (keyof typeof ac)[];
      const d = memo.diff(
        ac,
        keys.map((k) => ac[k]),
      );
      admission = keys.map((k, i) => [k, d[i]!] as [string, number]).filter(([, n]) => n !== 0);
    }
    if (counts.some((n) => n !== 0) || healthEvents.length > 0 || admission.length > 0)
      pools.push({ name: p.name, counts, healthEvents, admission });
  }
  const lim = src.limiter;
  let limiter: [string, number][] = [];
  if (lim !== null) {
    const keys = Object.keys(lim.counters) as (keyof typeof lim.counters)[];
    const d = memo.diff(
      lim.counters,
      keys.map((k) => lim.counters[k]),
    );
    limiter = keys.map((k, i) => [k, d[i]!] as [string, number]).filter(([, n]) => n !== 0);
  }
  const plugins: StatsDelta['plugins'] = [];
  for (const f of src.plugins.all()) {
    const series: [string[], number][] = [];
    for (const s of f.entries()) {
      const v = f.type === 'counter' ? memo.diff(s, [s.value])[0]! : s.value;
      if (f.type === 'gauge' || v !== 0) series.push([[...s.labels], v]);
    }
    if (series.length > 0 || f.type === 'gauge')
      plugins.push({ name: f.name, type: f.type, help: f.help, labelNames: [...f.labelNames], series });
  }
  return {
    routes,
    mirrors,
    plugins,
    rejected,
    abortedUnrouted,
    refused,
    series,
    listeners,
    nodes,
    pools,
    limiter,
    served: memo.diff(s, [s.served])[0]!,
    inFlight: s.inFlight,
    limiterConcurrent: lim?.concurrentRequests ?? 0,
    limiterReserved: lim?.reservedTokens ?? 0,
    tlsRetired: src.tlsRetired,
  };
}

/** What the main thread adds a report to. */
export interface DeltaTarget {
  stats: StatsRegistry;
  /** The current plan's nodes by `pool|id`. */
  node(pool: string, id: string): UpstreamNode | undefined;
  pool(name: string): PoolState | undefined;
  limiter: RateLimiter | null;
  plugins: PluginMetricsRegistry;
}

function absorbRoute(into: RouteStats | undefined, d: RouteDelta): void {
  if (into === undefined) return;
  for (const [status, n] of d.byStatus) into.byStatus.set(status, (into.byStatus.get(status) ?? 0) + n);
  into.aborted += d.aborted;
  if (d.duration !== null) into.duration.absorb(d.duration);
  if (d.ttfb !== null) into.ttfb.absorb(d.ttfb);
  if (d.ttft !== null) into.ttft.absorb(d.ttft);
}

/**
 * The main thread's side: adds worker `index`'s report. Counters of a route, series, node or pool
 * the main thread's plan no longer has (a reload between the report and now) are dropped, as the
 * main thread drops its own.
 */
export function absorbStatsDelta(t: DeltaTarget, index: number, d: StatsDelta): void {
  const s = t.stats;
  for (const r of d.routes) absorbRoute(s.routes.get(r.route), r);
  for (const r of d.mirrors) absorbRoute(s.mirrors.get(r.route), r);
  for (const [code, n] of d.rejected) s.rejected.set(code, (s.rejected.get(code) ?? 0) + n);
  s.abortedUnrouted += d.abortedUnrouted;
  for (let i = 0; i < d.refused.length && i < s.refused.length; i++) s.refused[i]! += d.refused[i]!;
  for (const sd of d.series) {
    const l = sd.labels;
    const m = l.tenant === '' ? s.series.findRoute(l.route, l.pool, l.node) : s.series.findTenant(l.tenant);
    m?.absorb(sd);
  }
  const connections = new Map<string, number>();
  for (const l of d.listeners) {
    connections.set(l.name, l.connections);
    const into = s.listeners.get(l.name);
    if (into === undefined) continue;
    into.refused += l.refused;
    into.headerTimeouts += l.headerTimeouts;
    into.bodyTimeouts += l.bodyTimeouts;
    into.writeTimeouts += l.writeTimeouts;
    if (l.bufferedHighWater > into.bufferedHighWater) into.bufferedHighWater = l.bufferedHighWater;
  }
  for (const n of d.nodes) {
    const node = t.node(n.pool, n.id);
    if (node === undefined) continue;
    node.attempts += n.attempts;
    node.failures += n.failures;
  }
  for (const p of d.pools) {
    const into = t.pool(p.name);
    if (into === undefined) continue;
    POOL_COUNTS.forEach((k, i) => (into[k] += p.counts[i]!));
    into.retryBudget.granted += p.counts[POOL_COUNTS.length]!;
    into.retryBudget.refused += p.counts[POOL_COUNTS.length + 1]!;
    for (const [kind, n] of p.healthEvents)
      into.healthEvents.set(kind, (into.healthEvents.get(kind) ?? 0) + n);
    const ac = into.admission?.counters as unknown as Record<string, number> | undefined;
    if (ac !== undefined) for (const [k, n] of p.admission) if (typeof ac[k] === 'number') ac[k] += n;
  }
  const lim = t.limiter;
  if (lim !== null)
    for (const [k, n] of d.limiter) {
      const c = lim.counters as unknown as Record<string, number>;
      if (typeof c[k] === 'number') c[k] += n;
    }
  for (const p of d.plugins) {
    let f;
    try {
      f = t.plugins.family(p.name, p.type, p.help, p.labelNames);
    } catch {
      continue; // declared otherwise in this thread (a reload between the report and now)
    }
    if (p.type === 'gauge') f.setRemote(index, p.series);
    else for (const [labels, n] of p.series) f.at(labels).value += n;
  }
  s.servedByWorker.set(index, (s.servedByWorker.get(index) ?? 0) + d.served);
  s.remote.set(index, {
    inFlight: d.inFlight,
    limiterConcurrent: d.limiterConcurrent,
    limiterReserved: d.limiterReserved,
    connections,
    tlsRetired: new Map(d.tlsRetired),
  });
}
