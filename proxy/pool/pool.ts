/**
 * A named set of nodes with one balancing policy, as compiled into a plan. Immutable: a config
 * change builds a new Pool, sharing its UpstreamNode objects (NodeRegistry) and its PoolState
 * (budgets, TTFB window, health) with the one it replaces.
 */
import type { AffinityExtractor } from '../balance/affinity-key.js';
import type { BalancePolicy, PickRequest, PoolMember } from '../balance/balance-policy.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { PoolState } from './pool-state.js';

export class Pool {
  readonly name: string;
  readonly members: readonly PoolMember[];
  readonly policy: BalancePolicy;
  readonly state: PoolState;
  /** Null when the pool's policy uses no affinity key. */
  readonly affinity: AffinityExtractor | null;
  /** Half-life of the per-node TTFB average, ms (least-response-time reads it). */
  readonly ttfbHalfLifeMs: number;
  /** `request_headers` as a flat `[name, value, ...]` list (environment resolved), or null. */
  requestHeaders: readonly string[] | null = null;

  constructor(
    name: string,
    members: readonly PoolMember[],
    policy: BalancePolicy,
    state: PoolState,
    affinity: AffinityExtractor | null,
    ttfbHalfLifeMs: number,
  ) {
    this.name = name;
    this.members = members;
    this.policy = policy;
    this.state = state;
    this.affinity = affinity;
    this.ttfbHalfLifeMs = ttfbHalfLifeMs;
  }

  /**
   * The node for the next attempt (see BalancePolicy.pick), or null if none is eligible. The
   * request's estimates are reset first, so a policy that gives none leaves them at -1.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    req.expectedTtftMs = req.cachedTokens = req.queuedMs = req.stallMs = -1;
    return this.policy.pick(req, tried);
  }
}
