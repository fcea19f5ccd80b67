/**
 * Smooth weighted round-robin: over any window of `sum(weights)` picks, each member is chosen
 * exactly `weight` times, interleaved rather than in bursts (node A, weight 2, and B, weight 1,
 * give A B A, not A A B).
 */
import type { BalancePolicy, PoolMember } from './balance-policy.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

export class RoundRobinPolicy implements BalancePolicy {
  readonly kind = 'round-robin';
  private readonly nodes: UpstreamNode[];
  private readonly weights: Float64Array;
  /** Running score per member: grows by its weight each pick, drops by the total when chosen. */
  private readonly current: Float64Array;
  private readonly total: number;

  constructor(members: readonly PoolMember[]) {
    const eligible = members.filter((m) => m.weight > 0);
    this.nodes = eligible.map((m) => m.node);
    this.weights = Float64Array.from(eligible, (m) => m.weight);
    this.current = new Float64Array(eligible.length);
    this.total = eligible.reduce((s, m) => s + m.weight, 0);
  }

  pick(exclude: UpstreamNode | null): UpstreamNode | null {
    // HOT
    const n = this.nodes.length;
    if (n === 0) return null;
    if (n === 1) return this.nodes[0]!;
    let best = -1;
    let bestScore = -Infinity;
    let total = this.total;
    for (let i = 0; i < n; i++) {
      if (this.nodes[i] === exclude) {
        // The excluded member takes no part in this pick, so the scores still sum to zero.
        total -= this.weights[i]!;
        continue;
      }
      this.current[i]! += this.weights[i]!;
      if (this.current[i]! > bestScore) {
        bestScore = this.current[i]!;
        best = i;
      }
    }
    if (best < 0) return null;
    this.current[best]! -= total;
    return this.nodes[best]!;
  }
}

/** Factory for the `round-robin` kind. */
export function createRoundRobin(members: readonly PoolMember[]): BalancePolicy {
  return new RoundRobinPolicy(members);
}
