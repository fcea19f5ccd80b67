/**
 * Counters and latency recorders that live across config reloads: a route or pool that keeps its
 * name keeps its series. Objects are looked up by name only when a plan is compiled; the request
 * path holds direct references.
 */
import type { AccessLog } from './access-log.js';
import { LatencyRecorder } from './latency-recorder.js';
import { ListenerStats } from './listener-stats.js';
import { REFUSAL_COUNT } from './refusals.js';
import { SeriesRegistry } from './series-registry.js';
import type { RemoteGauges } from './stats-delta.js';
import type { Tracer } from './trace-context.js';

/** Per-route request statistics. */
export class RouteStats {
  readonly route: string;
  /** Responses by HTTP status sent to the client. */
  readonly byStatus = new Map<number, number>();
  /** Client request to last byte sent, ms. */
  readonly duration = new LatencyRecorder();
  /** Dispatch to upstream response head, ms. */
  readonly ttfb = new LatencyRecorder();
  /** Streams only: request arrival to the first SSE event forwarded (time to first token), ms. */
  readonly ttft = new LatencyRecorder();
  /** Client aborts before the response finished. */
  aborted = 0;

  constructor(route: string) {
    this.route = route;
  }

  /** Counts one finished request. */
  count(status: number): void {
    // HOT
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
  }
}

/** Process-wide statistics owned by the running server. */
export class StatsRegistry {
  readonly routes = new Map<string, RouteStats>();
  /** Shadow traffic per route (its answers are measured and discarded). */
  readonly mirrors = new Map<string, RouteStats>();
  /** Requests refused before routing, by error code (framing, size, unknown route, draining). */
  readonly rejected = new Map<string, number>();
  /** Requests the client abandoned before they had a route (while sending the body). */
  abortedUnrouted = 0;
  /** Refusals by reason (index: `Refusal`, see refusals.ts). */
  readonly refused = new Float64Array(REFUSAL_COUNT);
  /** Histogram series per route × pool × node and per tenant. */
  readonly series = new SeriesRegistry();
  /** The access log, when `access_log` is on. */
  accessLog: AccessLog | null = null;
  /** The tracer, when `tracing` is configured. */
  tracer: Tracer | null = null;
  /** Config reloads by result (`applied`, `rejected`). */
  readonly reloads = new Map<string, number>();
  /** Requests currently being served, across all plans. */
  inFlight = 0;
  /** Requests this thread finished serving since start. */
  served = 0;
  /** Requests each worker thread (`server.workers`) finished serving, by worker index, as reported. */
  readonly servedByWorker = new Map<number, number>();
  /** Connection counters per listener, by listener name. */
  readonly listeners = new Map<string, ListenerStats>();
  /** The latest gauges reported by each worker thread (`server.workers`), by worker index. */
  readonly remote = new Map<number, RemoteGauges>();

  /** Requests in flight in every thread (this one's `inFlight` plus the workers' last reports). */
  get inFlightAll(): number {
    let n = this.inFlight;
    for (const g of this.remote.values()) n += g.inFlight;
    return n;
  }

  /** Open connections of listener `name` in every thread. */
  connectionsAll(name: string): number {
    let n = this.listeners.get(name)?.connections ?? 0;
    for (const g of this.remote.values()) n += g.connections.get(name) ?? 0;
    return n;
  }

  /** Returns the counters of a listener, creating them on first use (at listen time only). */
  listener(name: string): ListenerStats {
    let s = this.listeners.get(name);
    if (s === undefined) {
      s = new ListenerStats(name);
      this.listeners.set(name, s);
    }
    return s;
  }

  /** Returns the stats for a route name, creating them on first use (compile time only). */
  /**
   * Frees the counters of routes a reload removed (and of mirrors it removed), so that `/metrics` agrees
   * with `/admin/stats`. Called when a plan is compiled; requests still running on the old plan
   * count into the freed objects, which nothing reports.
   */
  retainRoutes(routes: ReadonlySet<string>, mirrored: ReadonlySet<string>): void {
    for (const name of this.routes.keys()) if (!routes.has(name)) this.routes.delete(name);
    for (const name of this.mirrors.keys()) if (!mirrored.has(name)) this.mirrors.delete(name);
  }

  route(name: string): RouteStats {
    let s = this.routes.get(name);
    if (s === undefined) {
      s = new RouteStats(name);
      this.routes.set(name, s);
    }
    return s;
  }

  /** The shadow-traffic stats of a route, created on first use (compile time only). */
  mirror(route: string): RouteStats {
    let s = this.mirrors.get(route);
    if (s === undefined) {
      s = new RouteStats(route);
      this.mirrors.set(route, s);
    }
    return s;
  }

  countRejected(code: string): void {
    this.rejected.set(code, (this.rejected.get(code) ?? 0) + 1);
  }

  countReload(result: 'applied' | 'rejected'): void {
    this.reloads.set(result, (this.reloads.get(result) ?? 0) + 1);
  }
}
