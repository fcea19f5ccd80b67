/**
 * The immutable runtime plan compiled from one config version, and the code that compiles it.
 * Requests take a reference to the plan current when they arrive and finish on it; a reload swaps
 * in a new plan and retires the old one, whose nodes are released once its last request is done.
 */
import type {
  BatchingConfig,
  PoolConfig,
  RouteConfig,
  SluiceConfig,
  TimeoutsConfig,
} from '../../config/types.js';
import { createAffinityExtractor } from '../balance/affinity-key.js';
import type { BalancePolicyFactory, PoolMember } from '../balance/balance-policy.js';
import { createCacheAware, DEFAULT_HOME_TOKENS } from '../balance/cache-aware.js';
import { createConsistentHash } from '../balance/consistent-hash.js';
import { createLeastRequest } from '../balance/least-request.js';
import { createLeastResponseTime } from '../balance/least-response-time.js';
import { createRoundRobin } from '../balance/round-robin.js';
import { DEFAULT_TTFB_HALF_LIFE_MS } from '../balance/ttfb-ewma.js';
import type { MetricSeries } from '../metrics/metric-series.js';
import { RouteSeries } from '../metrics/route-series.js';
import type { StatsRegistry } from '../metrics/stats.js';
import { Pool } from '../pool/pool.js';
import type { PoolState } from '../pool/pool-state.js';
import { PoolChoice } from '../route/pool-choice.js';
import { createRouteBatcher } from '../route/route-batching.js';
import { RetryOn, Route, RouteTable, type PoolBatcher, type ResolvedRetries } from '../route/route-table.js';
import type { Logger } from '../runtime/logger.js';
import type { NodeRegistry } from '../upstream/node-registry.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { attachHealth } from './health-wiring.js';
import { MAX_RING_POINTS, ringPoints, ringTooLarge } from '../balance/hash-ring.js';
import type { RuntimeState } from './runtime-state.js';
import {
  compilePreRoute,
  compileRouteChains,
  type PluginInstance,
  type PreRouteHooks,
} from '../plugin/plugin-chain.js';
import { compileTenantPlan, type TenantPlan } from './tenant-wiring.js';
import { RelayTarget, type BatchRelayClient } from '../runtime/batch-relay.js';

/** Balancing policies by YAML kind. */
const POLICIES: Record<PoolConfig['balance']['kind'], BalancePolicyFactory> = {
  'round-robin': createRoundRobin,
  'least-request': createLeastRequest,
  'least-response-time': createLeastResponseTime,
  'consistent-hash': createConsistentHash,
  'cache-aware': createCacheAware,
};

const RETRY_BITS: Record<string, number> = {
  'connect-failure': RetryOn.connectFailure,
  reset: RetryOn.reset,
  timeout: RetryOn.timeout,
  '5xx': RetryOn.status5xx,
  '429': RetryOn.status429,
};

export class Plan {
  /** Monotonic version, 1 for the config loaded at start. */
  readonly version: number;
  readonly config: SluiceConfig;
  /** sha256 of the file text the plan came from. */
  readonly digest: string;
  /** Wall-clock time the plan was applied (for the admin API only). */
  readonly appliedAt: Date;
  readonly routes: RouteTable;
  readonly pools: ReadonlyMap<string, Pool>;
  /** Tenants, their limits and the rate limiter (fields null when no tenants are configured). */
  readonly tenants: TenantPlan;
  /** Per listener index, the plugins' onRequest hooks that run before routing; null when none. */
  preRoute: readonly (PreRouteHooks | null)[] | null = null;
  /** The plugin instances of this plan, closed when it is disposed. */
  pluginInstances: readonly PluginInstance[] = [];
  /** Histogram series of each tenant, by `Tenant.index` (empty without tenants). */
  tenantSeries: readonly MetricSeries[] = [];
  /** Requests holding this plan. */
  inFlight = 0;
  /** States of pools this plan's config removed (the previous plan adopts and closes them). */
  removedPools: PoolState[] = [];
  private retired = false;
  /** States of pools a reload removed while this plan still used them; closed with the plan. */
  private orphans: PoolState[] = [];
  private readonly nodes: readonly UpstreamNode[];
  private readonly registry: NodeRegistry;

  constructor(
    version: number,
    config: SluiceConfig,
    digest: string,
    routes: RouteTable,
    pools: ReadonlyMap<string, Pool>,
    nodes: readonly UpstreamNode[],
    registry: NodeRegistry,
    tenants: TenantPlan,
  ) {
    this.version = version;
    this.config = config;
    this.digest = digest;
    this.appliedAt = new Date();
    this.routes = routes;
    this.pools = pools;
    this.nodes = nodes;
    this.registry = registry;
    this.tenants = tenants;
  }

  /** Called when a request starts on this plan. */
  acquire(): void {
    this.inFlight++;
  }

  /** Called exactly once per acquire, when the request is done. */
  release(): void {
    if (--this.inFlight === 0 && this.retired) this.dispose();
  }

  /** Marks the plan as replaced; its nodes are released when its last request finishes. */
  retire(): void {
    this.retired = true;
    if (this.inFlight === 0) this.dispose();
  }

  /** Hands over pool states that the next config removed: they close when this plan is done. */
  adoptOrphans(states: PoolState[]): void {
    this.orphans.push(...states);
  }

  private dispose(): void {
    // Batchers first: close() drains what they hold (nothing, once no request holds the plan);
    // the nodes' pools close gracefully after their last call.
    for (const r of this.routes.routes) {
      for (const b of r.batchers ?? []) void b.batcher.close();
      r.deadlines?.close();
      r.ttfbDeadlines?.close();
      r.idleDeadlines?.close();
    }
    for (const n of this.nodes) this.registry.release(n);
    for (const s of this.orphans) s.close();
    this.orphans = [];
    for (const p of this.pluginInstances) void p.close();
  }
}

/**
 * Connections per node for a pool: `connections_per_node` when set; else the circuit breaker's
 * `max_in_flight_per_node`, so that every request a node may take has a connection; else 0, no cap
 * (a GPU server takes hundreds of concurrent sequences; admission, when configured, bounds the
 * pool's requests in flight, and the balancer decides how they spread over the nodes).
 */
export function nodeConnections(pc: PoolConfig): number {
  if (pc.connections_per_node !== undefined) return pc.connections_per_node;
  return pc.max_in_flight_per_node > 0 ? pc.max_in_flight_per_node : 0;
}

function resolveRetries(rc: RouteConfig): ResolvedRetries {
  const r = rc.retries;
  let on = 0;
  for (const k of r.on) on |= RETRY_BITS[k] ?? 0;
  return {
    max: r.max,
    baseBackoffMs: r.base_backoff_ms,
    maxBackoffMs: r.max_backoff_ms,
    on,
    maxRetryAfterMs: r.max_retry_after_ms,
  };
}

/** What compiling needs besides the config. */
export interface CompileContext {
  registry: NodeRegistry;
  stats: StatsRegistry;
  runtime: RuntimeState;
  log: Logger;
  /** The config's plugin instances by name, created for this plan. Default none. */
  plugins?: ReadonlyMap<string, PluginInstance>;
  /**
   * In a worker thread of `server.workers`: the relay its batchers send their items through to the
   * main thread's (runtime/batch-relay.ts). Default none: the plan's batchers batch.
   */
  batchRelay?: BatchRelayClient | null;
}

/**
 * Compiles a validated config into a plan. Throws on what the loader cannot check (a tenant key's
 * environment variable missing) and on broken invariants (the loader's semantic checks guarantee
 * every route names known pools and every policy kind exists). Shared
 * state (pool budgets, health trackers) is reconfigured for the new plan as a side effect, so call
 * it only for a config that will be applied.
 */
export function compilePlan(
  version: number,
  config: SluiceConfig,
  digest: string,
  ctx: CompileContext,
): Plan {
  // First, everything that can refuse the config, before any shared state changes: a rejected
  // reload must leave limits, nodes, health and budgets exactly as they were.
  const requestHeaders = preflightPools(config);
  // It may throw (a missing key variable, bad limits) before it configures the shared rate limiter.
  const tenants = compileTenantPlan(
    config,
    () => ctx.runtime.rateLimiter(config.rate_limits, ctx.log),
    ctx.log,
  );
  const pools = new Map<string, Pool>();
  const nodes: UpstreamNode[] = [];
  for (const pc of config.pools) {
    const connections = nodeConnections(pc);
    // Nothing may wait inside the connection pool: a node with every connection busy is simply
    // not eligible, so the request goes to another node or waits in admission, where it is seen.
    const breaker = pc.max_in_flight_per_node > 0 ? pc.max_in_flight_per_node : Infinity;
    const maxInFlight = connections > 0 ? Math.min(breaker, connections) : breaker;
    const members: PoolMember[] = pc.nodes.map((nc) => {
      const node = ctx.registry.acquire(pc.name, nc.url, {
        connections,
        connectTimeoutMs: pc.timeouts.connect_ms,
        client: pc.upstream_client ?? 'sluice',
      });
      node.setMaxInFlight(maxInFlight);
      nodes.push(node);
      return { node, weight: nc.weight };
    });
    const b = pc.balance;
    const policy = POLICIES[b.kind](members, {
      epsilon: b.epsilon,
      spillFloorTokens: b.spill_floor_tokens,
      pointsPerWeight: b.points_per_weight,
      decayMs: b.decay_ms,
      cacheTokens: b.cache_tokens,
      queueWeight: b.queue_weight,
      stallWeight: b.stall_weight,
      indexMaxBytes: b.index_max_mb === undefined ? undefined : b.index_max_mb * 1024 * 1024,
      // The part of the prompt a prefix key covers is what its home node is credited with holding.
      homeTokens: b.affinity?.source === 'prefix' ? Math.ceil(b.affinity.chars / 4) : DEFAULT_HOME_TOKENS,
    });
    const state = ctx.runtime.poolState(pc);
    attachHealth(
      state,
      pc,
      members.map((m) => m.node),
      ctx.log,
      new Set(members.filter((m) => m.weight === 0).map((m) => m.node)),
      ctx.runtime.healthRelay,
    );
    const affinity =
      (b.kind === 'consistent-hash' || b.kind === 'cache-aware') && b.affinity !== undefined
        ? createAffinityExtractor(b.affinity)
        : null;
    const pool = new Pool(pc.name, members, policy, state, affinity, b.decay_ms ?? DEFAULT_TTFB_HALF_LIFE_MS);
    pool.requestHeaders = requestHeaders.get(pc.name) ?? null;
    pools.set(pc.name, pool);
  }
  const poolOf = (name: string): Pool => {
    const p = pools.get(name);
    if (p === undefined) throw new Error(`unknown pool ${name}`);
    return p;
  };
  const plugins = ctx.plugins ?? new Map<string, PluginInstance>();
  const routes = config.routes.map((rc, routeAt) => {
    const single = rc.pool === undefined ? null : poolOf(rc.pool);
    const split =
      rc.split === undefined
        ? null
        : new PoolChoice(
            rc.split.map((e) => ({ pool: poolOf(e.pool), weight: e.weight })),
            rc.pin_header ?? null,
            rc.sticky_header ?? null,
            rc.sticky_header === undefined ? null : ctx.runtime.stickyTable(rc.name),
          );
    const fallback = rc.fallback.map(poolOf);
    // A split route takes its timeouts from its first pool.
    const timeoutPool = rc.pool ?? rc.split?.[0]?.pool ?? '';
    const pc = config.pools.find((p) => p.name === timeoutPool);
    if (pc === undefined) throw new Error(`route ${rc.name}: no pool`);
    return new Route(
      rc,
      {
        pool: single,
        split,
        fallback,
        mirror:
          rc.mirror === undefined
            ? null
            : {
                pool: poolOf(rc.mirror.pool),
                share: rc.mirror.percent / 100,
                stats: ctx.stats.mirror(rc.name),
              },
        retries: resolveRetries(rc),
        routeHeader: rc.route_header,
        plugins: plugins.size === 0 ? null : compileRouteChains(config.listeners, rc.plugins, plugins),
        batchers:
          rc.batching === undefined
            ? null
            : routeBatchers(
                rc,
                rc.batching,
                single === null ? rc.split!.map((e) => poolOf(e.pool)) : [single],
                fallback,
                {
                  ...pc.timeouts,
                  ...rc.timeouts,
                },
                ctx.batchRelay ?? null,
                routeAt,
              ),
      },
      pc.timeouts,
      ctx.stats.route(rc.name),
    );
  });
  const removed = ctx.runtime.retain(new Set(pools.keys()), new Set(config.routes.map((r) => r.name)));
  const plan = new Plan(version, config, digest, new RouteTable(routes), pools, nodes, ctx.registry, tenants);
  plan.removedPools = removed;
  if (plugins.size > 0) {
    plan.preRoute = compilePreRoute(config.listeners, plugins);
    plan.pluginInstances = [...plugins.values()];
  }
  resolveSeries(plan, ctx.stats);
  return plan;
}

/**
 * A batching route's micro-batchers: one per pool its requests may be given (each split pool), each
 * falling back through the route's fallback pools, all under the route's timeouts. In a worker
 * thread (`relay`), each sends its items to the main thread's batcher at the same route position
 * `routeAt` and batcher position (runtime/batch-relay.ts).
 */
function routeBatchers(
  rc: RouteConfig,
  batching: BatchingConfig,
  pools: readonly Pool[],
  fallback: readonly Pool[],
  timeouts: TimeoutsConfig,
  relay: BatchRelayClient | null,
  routeAt: number,
): PoolBatcher[] {
  const path = batching.upstream_path ?? rc.match.path!;
  const distinct = [...new Set(pools)];
  return distinct.map((pool, at) => {
    const batcher = createRouteBatcher(rc.name, batching, path, pool, fallback, timeouts);
    if (relay !== null) batcher.relay = new RelayTarget(relay, routeAt, at, rc.name, pool.name, path);
    return { pool, batcher, onlyPath: rc.match.path === undefined ? path : null };
  });
}

/**
 * Resolves the histogram series the plan's requests record into (route × pool × node, tenants)
 * and frees the series of routes, nodes and tenants the config no longer has.
 */
function resolveSeries(plan: Plan, stats: StatsRegistry): void {
  const used = new Set<MetricSeries>();
  plan.routes.routes.forEach((r, i) => {
    const rc = plan.config.routes[i]!;
    const names = [
      ...(rc.pool === undefined ? [] : [rc.pool]),
      ...(rc.split ?? []).map((e) => e.pool),
      ...rc.fallback,
    ];
    const pools = names.map((n) => plan.pools.get(n)).filter((p): p is Pool => p !== undefined);
    r.series = new RouteSeries(r.name, pools, stats.series, used);
  });
  const table = plan.tenants.table;
  if (table !== null) {
    plan.tenantSeries = table.tenants.map((t) => {
      const s = stats.series.tenant(t.name);
      used.add(s);
      return s;
    });
  }
  stats.series.retain(used);
  const routes = plan.config.routes;
  stats.retainRoutes(
    new Set(routes.map((r) => r.name)),
    new Set(routes.filter((r) => r.mirror !== undefined).map((r) => r.name)),
  );
}

/**
 * The checks of the pools that the loader cannot make (environment variables are read now) and
 * whose failure would otherwise come after shared state changed: every pool's `request_headers`
 * resolved (returned by pool name), and every hash ring within its size limit (the loader checks
 * that too; a plan compiled without it must not fail half-way). Throws naming the pool.
 */
function preflightPools(config: SluiceConfig): Map<string, readonly string[] | null> {
  const headers = new Map<string, readonly string[] | null>();
  for (const pc of config.pools) {
    headers.set(pc.name, resolveRequestHeaders(pc.name, pc.request_headers));
    const kind = pc.balance.kind;
    if (kind !== 'consistent-hash' && kind !== 'cache-aware') continue;
    const total = ringPoints(
      pc.nodes.map((n) => n.weight),
      pc.balance.points_per_weight,
    );
    if (total > MAX_RING_POINTS) throw new Error(`pools ${pc.name}: ${ringTooLarge(total)}`);
  }
  return headers;
}

/**
 * A pool's `request_headers` as a flat list with every `${env:NAME}` replaced; throws naming the
 * pool, header and variable when one is not set (the config is refused). Null when there are none.
 */
export function resolveRequestHeaders(
  pool: string,
  headers: Readonly<Record<string, string>> | undefined,
  env: NodeJS.ProcessEnv = process.env,
): readonly string[] | null {
  if (headers === undefined) return null;
  const out: string[] = [];
  for (const [name, template] of Object.entries(headers)) {
    const value = template.replace(/\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, v: string) => {
      const x = env[v];
      if (x === undefined)
        throw new Error(
          `pools ${pool}: request_headers.${name} reads environment variable ${v}, which is not set`,
        );
      if (/[\r\n\0]/.test(x))
        throw new Error(
          `pools ${pool}: request_headers.${name}: environment variable ${v} holds CR, LF or NUL`,
        );
      return x;
    });
    out.push(name, value);
  }
  return out.length === 0 ? null : out;
}
