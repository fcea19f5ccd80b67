/**
 * Power-of-two-choices least-request: sample two distinct candidates (weighted by effective weight)
 * and take the one with less in-flight work per unit of weight. Load is counted in tokens, so a node
 * busy with a few long prompts loses to one busy with many short ones.
 */
import type { BalanceOptions, BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { MemberTable, candidateWeight } from './member-table.js';
import { Xorshift32, randomSeed } from './xorshift.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Options of `least-request`: the YAML ones plus a seed that tests use to replay picks exactly. */
export interface LeastRequestOptions extends BalanceOptions {
  /** PRNG seed (32-bit); default: a fresh random seed per policy instance. Not exposed in YAML. */
  seed?: number;
}

/** P2C over a fixed member list; reads `inFlight`/`inFlightCost` live from the nodes. */
export class LeastRequestPolicy implements BalancePolicy {
  readonly kind = 'least-request';
  readonly weighsCost = true;
  private readonly table: MemberTable;
  /** Scratch: effective weight per slot for the pick in progress (0 = not a candidate). */
  private readonly candidate: Float64Array;
  private readonly rng: Xorshift32;

  constructor(members: readonly PoolMember[], options: LeastRequestOptions) {
    this.table = new MemberTable(members);
    this.candidate = new Float64Array(this.table.length);
    this.rng = new Xorshift32(options.seed ?? randomSeed());
  }

  /**
   * Samples two distinct candidates with probability proportional to `weight × weightFactor` and
   * returns the one with the lower `(inFlightCost + cost) / effectiveWeight` (tie: fewer attempts
   * in flight, then the first sampled). One candidate: that one. None: null.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const { nodes, weights, length } = this.table;
    const cand = this.candidate;
    let total = 0;
    let count = 0;
    let only = -1;
    for (let i = 0; i < length; i++) {
      const w = candidateWeight(nodes[i]!, weights[i]!, tried);
      cand[i] = w;
      if (w > 0) {
        total += w;
        count++;
        only = i;
      }
    }
    if (count === 0) return null;
    if (count === 1) return nodes[only]!;
    const a = this.sample(total, -1);
    const b = this.sample(total - cand[a]!, a);
    const na = nodes[a]!;
    const nb = nodes[b]!;
    const sa = (na.inFlightCost + req.cost) / cand[a]!;
    const sb = (nb.inFlightCost + req.cost) / cand[b]!;
    if (sb < sa || (sb === sa && nb.inFlight < na.inFlight)) return nb;
    return na;
  }

  /**
   * One slot drawn with probability `candidate[i] / total`, skipping slot `skip` (whose weight the
   * caller already took out of `total`). Falls back to the last candidate if rounding runs past
   * the end.
   */
  private sample(total: number, skip: number): number {
    // HOT
    const cand = this.candidate;
    let r = this.rng.nextFloat() * total;
    let last = -1;
    for (let i = 0; i < cand.length; i++) {
      const w = cand[i]!;
      if (w === 0 || i === skip) continue;
      last = i;
      if (r < w) return i;
      r -= w;
    }
    return last;
  }
}

/**
 * Factory for the `least-request` kind (power of two choices over in-flight tokens).
 *
 * @example
 * const policy = createLeastRequest(members, { seed: 42 });
 * const node = policy.pick({ affinityKey: null, cost: 900, affinityOutcome: 'none' }, []);
 */
export function createLeastRequest(
  members: readonly PoolMember[],
  options: LeastRequestOptions,
): BalancePolicy {
  return new LeastRequestPolicy(members, options);
}
