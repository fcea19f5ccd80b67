/**
 * The series one route of one plan records into, resolved when the plan is compiled: one per node
 * of every pool the route can use (its pool or split pools and its fallbacks), and one per pool for
 * requests no single node answered. The request path finds its series by object identity, never by
 * name.
 */
import type { Pool } from '../pool/pool.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { MetricSeries } from './metric-series.js';
import { NO_NODE, type SeriesRegistry } from './series-registry.js';

export class RouteSeries {
  private readonly byNode = new Map<UpstreamNode, MetricSeries>();
  private readonly byPool = new Map<Pool, MetricSeries>();

  /** Resolves the series of `route` over `pools` in `registry`, adding each to `used`. */
  constructor(route: string, pools: readonly Pool[], registry: SeriesRegistry, used: Set<MetricSeries>) {
    for (const p of pools) {
      if (this.byPool.has(p)) continue;
      const none = registry.route(route, p.name, NO_NODE);
      this.byPool.set(p, none);
      used.add(none);
      for (const m of p.members) {
        const s = registry.route(route, p.name, m.node.id);
        this.byNode.set(m.node, s);
        used.add(s);
      }
    }
  }

  /** The series of a node that answered; its pool's `none` series if the node is not in the plan. */
  forNode(node: UpstreamNode, pool: Pool): MetricSeries {
    // HOT
    return this.byNode.get(node) ?? this.forPool(pool);
  }

  /** The series of requests in `pool` that no single node answered. */
  forPool(pool: Pool): MetricSeries {
    return this.byPool.get(pool) ?? this.byPool.values().next().value!;
  }
}
