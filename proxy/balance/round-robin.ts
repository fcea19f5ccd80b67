/**
 * Smooth weighted round-robin: over any window of `sum(weights)` picks, each member is chosen
 * exactly `weight` times, interleaved rather than in bursts (node A, weight 2, and B, weight 1,
 * give A B A, not A A B). Ignores load; skips ineligible and already-tried nodes.
 */
import type { BalanceOptions, BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { MemberTable, candidateWeight } from './member-table.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Smooth weighted round-robin over a fixed member list (nginx's algorithm). */
export class RoundRobinPolicy implements BalancePolicy {
  readonly kind = 'round-robin';
  readonly weighsCost = false;
  private readonly table: MemberTable;
  /**
   * Running score per member: grows by its effective weight on each pick it takes part in, drops
   * by the sum of the participants' effective weights when chosen, so the scores always sum to 0.
   */
  private readonly current: Float64Array;

  constructor(members: readonly PoolMember[]) {
    this.table = new MemberTable(members);
    this.current = new Float64Array(this.table.length);
  }

  /**
   * The member with the highest running score among eligible, untried members, each weighted by
   * `weight × weightFactor`; null when there is none. Members left out of a pick (ineligible,
   * tried, factor 0) keep their score, so the long-run shares of the others stay exact.
   */
  pick(_req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const { nodes, weights, length } = this.table;
    const current = this.current;
    let best = -1;
    let bestScore = -Infinity;
    let total = 0;
    for (let i = 0; i < length; i++) {
      const w = candidateWeight(nodes[i]!, weights[i]!, tried);
      if (w === 0) continue;
      const score = current[i]! + w;
      current[i] = score;
      total += w;
      if (score > bestScore) {
        bestScore = score;
        best = i;
      }
    }
    if (best < 0) return null;
    current[best]! -= total;
    return nodes[best]!;
  }
}

/**
 * Factory for the `round-robin` kind. Takes no options.
 *
 * @example
 * const policy = createRoundRobin([{ node: a, weight: 2 }, { node: b, weight: 1 }], {});
 * policy.pick(req, []); // a, then b, then a
 */
export function createRoundRobin(members: readonly PoolMember[], _options: BalanceOptions): BalancePolicy {
  return new RoundRobinPolicy(members);
}
