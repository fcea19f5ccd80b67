/**
 * Reads a compiled plan as the capacity trackers see it: each pool with its nodes, its config and
 * the micro-batchers that call it. Built once per plan and cached; it never changes the plan.
 */
import type { Plan } from '../plan/plan.js';
import type { CapacityBatcher, CapacityPoolSource } from './pool-capacity.js';

const cache = new WeakMap<Plan, readonly CapacityPoolSource[]>();

/**
 * The pools of `plan` in config order. Called by the capacity monitor on every sample; the same
 * array (and the same `nodes` and `batchers` arrays) comes back for the same plan, which is how the
 * trackers notice a reload.
 */
export function capacityPoolsOf(plan: Plan): readonly CapacityPoolSource[] {
  let pools = cache.get(plan);
  if (pools !== undefined) return pools;
  const batchers = new Map<string, CapacityBatcher[]>();
  for (const route of plan.routes.routes) {
    if (route.batchers === null) continue;
    const rc = plan.config.routes.find((r) => r.name === route.name);
    const b = rc?.batching;
    if (b === undefined) continue;
    // A batching route has a batcher per pool its requests are given (calls that fall back to
    // another pool count as the given pool's).
    for (const pb of route.batchers) {
      const pool = pb.pool.name;
      let list = batchers.get(pool);
      if (list === undefined) batchers.set(pool, (list = []));
      list.push({ stats: pb.batcher.stats, mode: b.mode, maxConcurrentPerNode: b.max_concurrent_per_node });
    }
  }
  pools = plan.config.pools.flatMap((config) => {
    const pool = plan.pools.get(config.name);
    if (pool === undefined) return [];
    return [
      {
        name: config.name,
        config,
        nodes: pool.members.map((m) => m.node),
        batchers: batchers.get(config.name) ?? [],
      },
    ];
  });
  cache.set(plan, pools);
  return pools;
}
