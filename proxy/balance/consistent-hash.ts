/**
 * Consistent hashing with bounded load (Mirrokni, Thorup, Zadimoghaddam; HAProxy's
 * `hash-balance-factor`): a key goes to its home node on the ring unless that node already carries
 * more than its share of `(1 + epsilon) ×` the pool's in-flight work, in which case it walks on to
 * the next distinct node. Requests without a key are placed by least-request.
 */
import type { BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { AffinityOutcome, affinityHashOf, eligible } from './balance-policy.js';
import { DEFAULT_POINTS_PER_WEIGHT, HashRing } from './hash-ring.js';
import { LeastRequestPolicy, type LeastRequestOptions } from './least-request.js';
import { MemberTable, candidateWeight } from './member-table.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Default bounded-load factor: no node takes a request while above 1.25 × its fair share. */
export const DEFAULT_EPSILON = 0.25;

/**
 * Default spill floor, tokens: below this much in-flight work a node keeps its keys whatever the
 * other nodes carry. A GPU batches a few requests at little cost, while a spilled request loses its
 * KV-cache prefix; without a floor, two requests for one idle pool's same node would already spill.
 */
export const DEFAULT_SPILL_FLOOR_TOKENS = 16_384;

/** Options of `consistent-hash`; `seed` only feeds the least-request fallback for keyless requests. */
export type ConsistentHashOptions = LeastRequestOptions;

/** Consistent hashing with bounded load over a fixed member list. */
export class ConsistentHashPolicy implements BalancePolicy {
  readonly kind = 'consistent-hash';
  readonly weighsCost = true;
  private readonly table: MemberTable;
  private readonly ring: HashRing;
  /** Bounded-load factor (unitless, >= 0; Infinity turns the bound off). */
  private readonly epsilon: number;
  /** In-flight work under which a node is never skipped, tokens. */
  private readonly spillFloor: number;
  /** Places requests that carry no affinity key. */
  private readonly keyless: LeastRequestPolicy;
  /** Scratch per slot for the pick in progress: effective weight (0 = not a candidate). */
  private readonly candidate: Float64Array;
  /** Per slot: the pick number that last visited it on the ring walk (avoids clearing per pick). */
  private readonly visited: Uint32Array;
  /** Pick counter for `visited`; 0 is never used as a stamp. */
  private stamp = 0;

  constructor(members: readonly PoolMember[], options: ConsistentHashOptions) {
    this.table = new MemberTable(members);
    const eps = options.epsilon;
    this.epsilon = eps !== undefined && eps >= 0 ? eps : DEFAULT_EPSILON;
    const floor = options.spillFloorTokens;
    this.spillFloor = floor !== undefined && floor >= 0 ? floor : DEFAULT_SPILL_FLOOR_TOKENS;
    const ppw = options.pointsPerWeight;
    const pointsPerWeight = ppw !== undefined && ppw > 0 && ppw < Infinity ? ppw : DEFAULT_POINTS_PER_WEIGHT;
    this.ring = new HashRing(
      this.table.nodes.map((n) => n.id),
      this.table.weights,
      pointsPerWeight,
    );
    this.keyless = new LeastRequestPolicy(members, options);
    this.candidate = new Float64Array(this.table.length);
    this.visited = new Uint32Array(this.table.length);
  }

  /**
   * Without a key: least-request, outcome `none`. With a key: the first node clockwise from the
   * key's hash that is a candidate (eligible, untried, effective weight > 0) and whose in-flight
   * work is below its bound, `(1 + epsilon) × (poolInFlightCost + cost) × effW / poolEffW`, or below
   * the spill floor (`spillFloorTokens`: a lightly loaded node keeps its keys, unless it is in slow
   * start); outcome
   * `hit` when that is the key's home node (the owner of its first point), `spill` otherwise. The
   * bound is checked on the load before this request, as in the paper (a node at zero load always
   * qualifies), so a node ends at most one request above it. If no candidate is within its bound
   * (possible only when eligible nodes were excluded as tried), the least loaded candidate per
   * unit of weight takes it. Null when there is no candidate.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const key = req.affinityKey;
    if (key === null) {
      req.affinityOutcome = AffinityOutcome.none;
      return this.keyless.pick(req, tried);
    }
    const { nodes, weights, length } = this.table;
    const cand = this.candidate;
    // The pool's load and capacity count every eligible member, tried ones included: they still
    // carry work. Ineligible members (down, saturated, at their limit) are outside the mean.
    let poolCost = 0; // tokens
    let poolWeight = 0;
    let count = 0;
    for (let i = 0; i < length; i++) {
      const node = nodes[i]!;
      const w = candidateWeight(node, weights[i]!, tried);
      cand[i] = w;
      if (w > 0) count++;
      if (eligible(node)) {
        const eff = weights[i]! * node.weightFactor;
        if (eff > 0 && eff < Infinity) {
          poolCost += node.inFlightCost;
          poolWeight += eff;
        }
      }
    }
    req.affinityOutcome = AffinityOutcome.none;
    if (count === 0) return null;
    // Tokens of in-flight work allowed per unit of effective weight.
    const perWeight = ((1 + this.epsilon) * (poolCost + req.cost)) / poolWeight;

    const ring = this.ring;
    const owners = ring.owners;
    const start = ring.locateHash(affinityHashOf(req, key));
    const home = owners[start]!;
    const visited = this.visited;
    if (this.stamp === 0xffffffff) {
      visited.fill(0);
      this.stamp = 0;
    }
    const stamp = ++this.stamp;
    let seen = 0;
    let chosen = -1;
    for (let k = 0, p = start; k < ring.size; k++, p = p + 1 === ring.size ? 0 : p + 1) {
      const slot = owners[p]!;
      if (visited[slot] === stamp) continue;
      visited[slot] = stamp;
      const w = cand[slot]!;
      const node = nodes[slot]!;
      const load = node.inFlightCost;
      // The floor is for nodes at full weight; one in slow start is held to the bound alone.
      if (w > 0 && (load < perWeight * w || (load < this.spillFloor && node.weightFactor >= 1))) {
        chosen = slot;
        break;
      }
      if (++seen === length) break;
    }
    if (chosen < 0) chosen = this.leastLoaded(req.cost);
    req.affinityOutcome = chosen === home ? AffinityOutcome.hit : AffinityOutcome.spill;
    return nodes[chosen]!;
  }

  /** The candidate with the least `(inFlightCost + cost) / effectiveWeight` (first on ties). */
  private leastLoaded(cost: number): number {
    const { nodes, length } = this.table;
    const cand = this.candidate;
    let best = -1;
    let bestScore = Infinity;
    for (let i = 0; i < length; i++) {
      const w = cand[i]!;
      if (w === 0) continue;
      const score = (nodes[i]!.inFlightCost + cost) / w;
      if (best < 0 || score < bestScore) {
        best = i;
        bestScore = score;
      }
    }
    return best;
  }
}

/**
 * Factory for the `consistent-hash` kind. Options: `epsilon` (default 0.25; `Infinity` disables the
 * load bound), `spillFloorTokens` (default 16384; 0 applies the bound at any load),
 * `pointsPerWeight` (default 100 ring points per unit of weight). The mapping depends
 * only on node ids, weights and `pointsPerWeight`: `test/balance/consistent-hash.golden.json` pins it.
 *
 * @example
 * const policy = createConsistentHash(members, { epsilon: 0.25 });
 * const req = { affinityKey: 'session-42', cost: 2000, affinityOutcome: 'none' as const };
 * policy.pick(req, []); // same node in every process; req.affinityOutcome === 'hit' unless it spilled
 */
export function createConsistentHash(
  members: readonly PoolMember[],
  options: ConsistentHashOptions,
): BalancePolicy {
  return new ConsistentHashPolicy(members, options);
}
