/**
 * The immutable runtime plan compiled from one config version, and the code that compiles it.
 * Requests take a reference to the plan current when they arrive and finish on it; a reload swaps
 * in a new plan and retires the old one, whose nodes are released once its last request is done.
 */
import type { SluiceConfig } from '../../config/types.js';
import type { BalancePolicyFactory, PoolMember } from '../balance/balance-policy.js';
import { createRoundRobin } from '../balance/round-robin.js';
import type { StatsRegistry } from '../metrics/stats.js';
import { Pool } from '../pool/pool.js';
import { Route, RouteTable } from '../route/route-table.js';
import type { NodeRegistry } from '../upstream/node-registry.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Balancing policies by YAML kind. */
const POLICIES: Record<string, BalancePolicyFactory> = {
  'round-robin': createRoundRobin,
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
  /** Requests holding this plan. */
  inFlight = 0;
  private retired = false;
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
  ) {
    this.version = version;
    this.config = config;
    this.digest = digest;
    this.appliedAt = new Date();
    this.routes = routes;
    this.pools = pools;
    this.nodes = nodes;
    this.registry = registry;
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

  private dispose(): void {
    for (const n of this.nodes) this.registry.release(n);
  }
}

/**
 * Compiles a validated config into a plan. Throws only on a broken invariant (the loader's
 * semantic checks guarantee every route names a known pool and every policy kind exists).
 */
export function compilePlan(
  version: number,
  config: SluiceConfig,
  digest: string,
  registry: NodeRegistry,
  stats: StatsRegistry,
): Plan {
  const pools = new Map<string, Pool>();
  const nodes: UpstreamNode[] = [];
  for (const pc of config.pools) {
    const members: PoolMember[] = pc.nodes.map((nc) => {
      const node = registry.acquire(nc.url, {
        connections: pc.connections_per_node,
        connectTimeoutMs: pc.timeouts.connect_ms,
      });
      nodes.push(node);
      return { node, weight: nc.weight };
    });
    const factory = POLICIES[pc.balance.kind];
    if (factory === undefined) throw new Error(`unknown balance kind ${pc.balance.kind}`);
    pools.set(pc.name, new Pool(pc.name, members, factory(members)));
  }
  const routes = config.routes.map((rc) => {
    const pool = pools.get(rc.pool);
    const pc = config.pools.find((p) => p.name === rc.pool);
    if (pool === undefined || pc === undefined) throw new Error(`route ${rc.name}: unknown pool ${rc.pool}`);
    return new Route(rc, pool, pc.timeouts, stats.route(rc.name));
  });
  return new Plan(version, config, digest, new RouteTable(routes), pools, nodes, registry);
}
