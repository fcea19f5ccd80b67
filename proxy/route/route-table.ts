/**
 * Compiled routes and the matcher. Conditions are turned into flat fields once per plan; matching
 * walks the routes in file order and returns the first whose conditions all hold. The JSON body is
 * parsed only when a candidate route has a `models` condition.
 */
import { DeadlineList } from '../lifecycle/deadline-list.js';
import type { RouteConfig, TimeoutsConfig } from '../../config/types.js';
import type { Pool } from '../pool/pool.js';
import type { RouteStats } from '../metrics/stats.js';
import type { RouteSeries } from '../metrics/route-series.js';
import type { Session } from '../lifecycle/session.js';
import type { PoolChoice } from './pool-choice.js';
import type { MicroBatcher } from '../batch/micro-batcher.js';
import type { PluginChain } from '../plugin/plugin-chain.js';

/** What a route retries on, as bits. */
export const RetryOn = {
  connectFailure: 1,
  reset: 2,
  timeout: 4,
  status5xx: 8,
  status429: 16,
} as const;

/** A route's retry settings, resolved. */
export interface ResolvedRetries {
  /** Extra attempts after the first. */
  max: number;
  baseBackoffMs: number;
  maxBackoffMs: number;
  /** Bits of RetryOn. */
  on: number;
  maxRetryAfterMs: number;
}

/** Shadow traffic of a route. */
export interface ResolvedMirror {
  pool: Pool;
  /** Share of requests copied, 0..1. */
  share: number;
  /** The route's shadow-traffic stats, resolved at compile time. */
  stats: RouteStats;
}

/** Everything a route leads to, compiled by the plan. */
export interface RouteTargets {
  /** The single pool, or null when `split` decides. */
  pool: Pool | null;
  split: PoolChoice | null;
  fallback: readonly Pool[];
  mirror: ResolvedMirror | null;
  retries: ResolvedRetries;
  routeHeader: boolean;
  /**
   * The route's micro-batchers, one per pool a request may be sent to (its pool, or each pool of
   * its split), or null when requests go upstream one by one.
   */
  batchers: readonly PoolBatcher[] | null;
  /** Plugin chains by listener index; null when no plugin applies to the route. Default null. */
  plugins?: readonly (PluginChain | null)[] | null;
}

/** Timeouts resolved for one route, ms (0 = disabled). */
export interface ResolvedTimeouts {
  connectMs: number;
  ttfbMs: number;
  idleMs: number;
  totalMs: number;
}

/** The micro-batcher of a route's requests that were given `pool`. */
export interface PoolBatcher {
  readonly pool: Pool;
  readonly batcher: MicroBatcher;
  /**
   * On a `path_prefix` route, the one path whose requests are batched (`upstream_path`: the others
   * under the prefix go alone, as sent); null on an exact-path route, whose requests all are.
   */
  readonly onlyPath: string | null;
}

export class Route {
  readonly name: string;
  /** The pool, or null when `split` chooses one per request. */
  readonly pool: Pool | null;
  readonly split: PoolChoice | null;
  /** Pools tried in order when the chosen one has no eligible node. */
  readonly fallback: readonly Pool[];
  readonly mirror: ResolvedMirror | null;
  readonly retries: ResolvedRetries;
  /** Add `x-sluice-route` to responses. */
  readonly routeHeader: boolean;
  /** Requests without an API key are served as the anonymous tenant. */
  readonly allowAnonymous: boolean;
  /** Micro-batchers of the route by the pool a request was given, or null. */
  readonly batchers: readonly PoolBatcher[] | null;
  /** Plugin chains by listener index, or null when no plugin applies (one check per request). */
  readonly plugins: readonly (PluginChain | null)[] | null;
  readonly timeouts: ResolvedTimeouts;
  /** Total-timeout deadlines of the route's requests under one timer; null when total_ms is 0. */
  readonly deadlines: DeadlineList | null;
  /** Time-to-first-byte deadlines of the route's upstream attempts; null when ttfb_ms is 0. */
  readonly ttfbDeadlines: DeadlineList | null;
  /** Body-gap deadlines of the route's upstream attempts; null when idle_ms is 0. */
  readonly idleDeadlines: DeadlineList | null;
  readonly stats: RouteStats;
  /** Histogram series per pool and node, resolved when the plan is compiled. */
  series: RouteSeries | null = null;
  /** Exact path, or null. */
  private readonly path: string | null;
  /** Path prefix, or null. */
  private readonly pathPrefix: string | null;
  /** Upper-case methods, or null for any. */
  private readonly methods: readonly string[] | null;
  /** Lower-case host without port, or null. */
  private readonly host: string | null;
  /** Flat `[name, value, ...]` conditions, or null. */
  private readonly headers: readonly string[] | null;
  /** Accepted JSON `model` values, or null. */
  readonly models: ReadonlySet<string> | null;

  constructor(config: RouteConfig, targets: RouteTargets, poolTimeouts: TimeoutsConfig, stats: RouteStats) {
    this.name = config.name;
    this.pool = targets.pool;
    this.split = targets.split;
    this.fallback = targets.fallback;
    this.mirror = targets.mirror;
    this.retries = targets.retries;
    this.routeHeader = targets.routeHeader;
    this.allowAnonymous = config.allow_anonymous;
    this.batchers = targets.batchers;
    this.plugins = targets.plugins ?? null;
    this.stats = stats;
    const t = { ...poolTimeouts, ...config.timeouts };
    this.timeouts = { connectMs: t.connect_ms, ttfbMs: t.ttfb_ms, idleMs: t.idle_ms, totalMs: t.total_ms };
    this.deadlines = t.total_ms > 0 ? new DeadlineList(t.total_ms) : null;
    this.ttfbDeadlines = t.ttfb_ms > 0 ? new DeadlineList(t.ttfb_ms) : null;
    this.idleDeadlines = t.idle_ms > 0 ? new DeadlineList(t.idle_ms) : null;
    const m = config.match;
    this.path = m.path ?? null;
    this.pathPrefix = m.path_prefix ?? null;
    this.methods = m.methods && m.methods.length > 0 ? m.methods.map((x) => x.toUpperCase()) : null;
    this.host = m.host ?? null; // lower-cased by the config loader
    const h = m.headers ? Object.entries(m.headers).flatMap(([k, v]) => [k.toLowerCase(), v]) : [];
    this.headers = h.length > 0 ? h : null;
    this.models = m.models && m.models.length > 0 ? new Set(m.models) : null;
  }

  /**
   * The micro-batcher for a request to `path` given `pool`, or null when the route does not batch
   * it (no batching, or a prefix route's request to another path than its batch calls').
   */
  batcherFor(pool: Pool, path: string): MicroBatcher | null {
    // HOT
    const list = this.batchers;
    if (list === null) return null;
    for (let i = 0; i < list.length; i++) {
      const b = list[i]!;
      if (b.pool === pool) return b.onlyPath === null || b.onlyPath === path ? b.batcher : null;
    }
    return null;
  }

  /** True when the route has a `path` or `path_prefix` condition. */
  get namesPath(): boolean {
    return this.path !== null || this.pathPrefix !== null;
  }

  /** The pool that serves this request (the single pool, or the split's choice). */
  choosePool(s: Session): Pool {
    // HOT
    return this.pool ?? this.split!.choose(s);
  }

  /** True when every condition except `models` holds. */
  matchesHead(s: Session): boolean {
    // HOT
    if (this.path !== null && s.path !== this.path) return false;
    if (this.pathPrefix !== null && !s.path.startsWith(this.pathPrefix)) return false;
    if (this.methods !== null && !this.methods.includes(s.method)) return false;
    if (this.host !== null && s.hostName !== this.host) return false;
    const h = this.headers;
    if (h !== null) {
      for (let i = 0; i < h.length; i += 2) {
        if (s.header(h[i]!) !== h[i + 1]) return false;
      }
    }
    return true;
  }
}

export class RouteTable {
  readonly routes: readonly Route[];

  constructor(routes: readonly Route[]) {
    this.routes = routes;
  }

  /**
   * The first route whose conditions all hold, or null. Parses the body as JSON (once, cached on the
   * session) only when a route that otherwise matches names models.
   */
  match(s: Session): Route | null {
    // HOT
    const routes = this.routes;
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      if (!r.matchesHead(s)) continue;
      if (r.models === null) return r;
      const model = s.model();
      if (model !== null && r.models.has(model)) return r;
    }
    return null;
  }

  /**
   * After `match` found nothing: true when a route for the request's path (one with a `path` or
   * `path_prefix` condition) matched its head and was passed over only for its `models`: the model
   * asked for is not served there. A path no route names stays a route miss.
   */
  refusedForModel(s: Session): boolean {
    for (const r of this.routes) if (r.models !== null && r.namesPath && r.matchesHead(s)) return true;
    return false;
  }
}
