/**
 * The flat view of a pool's members that every policy picks over, and the one gate every pick goes
 * through (eligible, not already tried, effective weight above zero). Built once per plan; holds
 * no per-request state.
 */
import { eligible, type PoolMember } from './balance-policy.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

// A module-local copy of an imported binding: optimised code reads an import through its module
// cell, checked for initialisation, at every use; a local constant is folded into the code.
const isEligible = eligible;

/** Members with a positive, finite weight, as parallel arrays (index = member slot). */
export class MemberTable {
  readonly nodes: readonly UpstreamNode[];
  /** Configured weight per slot (unitless, > 0). */
  readonly weights: Float64Array;
  readonly length: number;

  /** Drops members of weight 0 (never picked), keeping the configured order of the others. */
  constructor(members: readonly PoolMember[]) {
    const kept = members.filter((m) => Number.isFinite(m.weight) && m.weight > 0);
    this.nodes = kept.map((m) => m.node);
    this.weights = Float64Array.from(kept, (m) => m.weight);
    this.length = kept.length;
  }
}

/** True when `node` is one of `tried` (a short list: the earlier attempts of one request). */
export function wasTried(tried: readonly UpstreamNode[], node: UpstreamNode): boolean {
  // HOT
  for (let j = 0; j < tried.length; j++) if (tried[j] === node) return true;
  return false;
}

/**
 * The weight `node` competes with in this pick: `weight × node.weightFactor` (slow start) when the
 * node is eligible and not in `tried`, else 0. Every policy calls this for every member it
 * considers, so no policy can return an ineligible, tried or zero-weight node.
 */
export function candidateWeight(node: UpstreamNode, weight: number, tried: readonly UpstreamNode[]): number {
  // HOT
  if (!isEligible(node) || wasTried(tried, node)) return 0;
  const w = weight * node.weightFactor;
  // NaN fails the comparison too, so a corrupt factor takes the node out rather than poisoning sums.
  return w > 0 && w < Infinity ? w : 0;
}
