/**
 * A named set of nodes with one balancing policy, as compiled into a plan. Immutable: a config
 * change builds a new Pool (sharing UpstreamNode objects through the NodeRegistry).
 */
import type { BalancePolicy, PoolMember } from '../balance/balance-policy.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

export class Pool {
  readonly name: string;
  readonly members: readonly PoolMember[];
  readonly policy: BalancePolicy;

  constructor(name: string, members: readonly PoolMember[], policy: BalancePolicy) {
    this.name = name;
    this.members = members;
    this.policy = policy;
  }

  /** The node for the next attempt (see BalancePolicy.pick), or null if none is eligible. */
  pick(exclude: UpstreamNode | null): UpstreamNode | null {
    return this.policy.pick(exclude);
  }
}
