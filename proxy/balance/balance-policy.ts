/**
 * The interface every balancing policy implements. A policy is built from an immutable member list
 * when a plan is compiled and only chooses among those members; health, discovery and retries live
 * elsewhere.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** A node as a member of one pool, with that pool's weight for it. */
export interface PoolMember {
  readonly node: UpstreamNode;
  /** Relative share of traffic; 0 means never picked. */
  readonly weight: number;
}

export interface BalancePolicy {
  /** The policy kind as written in YAML (`round-robin`). */
  readonly kind: string;
  /**
   * Chooses the node for the next attempt, never `exclude` (the node that just failed) unless it is
   * the only choice left. Returns null when the pool has no eligible member.
   */
  pick(exclude: UpstreamNode | null): UpstreamNode | null;
}

/** Builds a policy over a fixed member list. */
export type BalancePolicyFactory = (members: readonly PoolMember[]) => BalancePolicy;
