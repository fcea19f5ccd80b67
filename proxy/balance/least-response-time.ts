/**
 * Least response time: the candidate with the lowest `ttfb × (1 + load) / effectiveWeight`, where
 * ttfb is the node's decaying time-to-first-byte average (`ttfb-ewma.ts`) and load its in-flight
 * work in units of an average request. Reads node fields only; the session records the samples.
 */
import type { BalanceOptions, BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { eligible } from './balance-policy.js';
import { MemberTable, candidateWeight } from './member-table.js';
import { DEFAULT_TTFB_HALF_LIFE_MS } from './ttfb-ewma.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Picks over which the running mean request cost is averaged (count-based EWMA window). */
const COST_WINDOW = 256;
/** Floor of the ttfb used in scores, ms, so that a 0 ms sample cannot cancel the load term. */
const MIN_TTFB_MS = 0.01;

/** Least-response-time over a fixed member list. */
export class LeastResponseTimePolicy implements BalancePolicy {
  readonly kind = 'least-response-time';
  readonly weighsCost = true;
  private readonly table: MemberTable;
  /** Half-life of a TTFB average's trustworthiness, ms (the `decayMs` option). */
  private readonly halfLifeMs: number;
  /** Scratch per slot for the pick in progress: effective weight (0 = not a candidate). */
  private readonly candidate: Float64Array;
  /**
   * Scratch per slot: freshness of the node's TTFB average, `2^(-age / halfLife)` where age is how
   * much older its last sample is than the pool's newest; 0 = unprobed or ineligible.
   */
  private readonly freshness: Float64Array;
  /** Running mean cost of the requests this policy placed, tokens; 0 before the first pick. */
  private meanCost = 0;
  /** Slot the next scan starts at, so members with equal scores take turns. */
  private cursor = 0;

  constructor(members: readonly PoolMember[], options: BalanceOptions) {
    this.table = new MemberTable(members);
    this.halfLifeMs =
      options.decayMs !== undefined && options.decayMs > 0 ? options.decayMs : DEFAULT_TTFB_HALF_LIFE_MS;
    this.candidate = new Float64Array(this.table.length);
    this.freshness = new Float64Array(this.table.length);
  }

  /**
   * The candidate with the lowest `ttfb × (1 + inFlightCost / meanCost) / (weight × weightFactor)`;
   * null when there is none. See `docs/balancing.md` for how stale and unprobed averages are scored.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const { nodes, weights, length } = this.table;
    if (length === 0) return null;
    const cand = this.candidate;
    const fresh = this.freshness;
    const halfLife = this.halfLifeMs;
    if (req.cost > 0) {
      this.meanCost =
        this.meanCost === 0 ? req.cost : this.meanCost + (req.cost - this.meanCost) / COST_WINDOW;
    }
    const meanCost = this.meanCost;

    // Pass 1: candidates, and the newest TTFB sample time among eligible probed members. Ages are
    // measured from that sample, not from the clock: while the whole pool is idle nobody learns
    // anything, so nobody's average goes stale (and a pick reads no clock).
    let count = 0;
    let newest = -Infinity;
    for (let i = 0; i < length; i++) {
      const node = nodes[i]!;
      cand[i] = candidateWeight(node, weights[i]!, tried);
      if (cand[i]! > 0) count++;
      if (node.ttfbEwmaMs >= 0 && node.ttfbUpdatedMs > newest && eligible(node)) newest = node.ttfbUpdatedMs;
    }
    if (count === 0) return null;

    // Pass 2: the pool's reference TTFB, the mean of the eligible members' averages, each weighted by
    // its freshness, so a long-unrefreshed outlier does not drag the reference.
    let sumFresh = 0;
    let sumFreshTtfb = 0;
    for (let i = 0; i < length; i++) {
      const node = nodes[i]!;
      let f = 0;
      if (node.ttfbEwmaMs >= 0 && eligible(node)) {
        const age = newest - node.ttfbUpdatedMs;
        f = age > 0 ? Math.pow(2, -age / halfLife) : 1;
        sumFresh += f;
        sumFreshTtfb += f * node.ttfbEwmaMs;
      }
      fresh[i] = f;
    }
    const reference = sumFresh > 0 ? sumFreshTtfb / sumFresh : 1;

    // Pass 3: argmin of the score, scanning from the cursor so ties rotate.
    let best = -1;
    let bestScore = Infinity;
    let bestInFlight = 0;
    let i = this.cursor;
    for (let k = 0; k < length; k++, i = i + 1 === length ? 0 : i + 1) {
      const w = cand[i]!;
      if (w === 0) continue;
      const node = nodes[i]!;
      // Unprobed: the reference (a fair start). Probed: its own average, fading toward the
      // reference as it ages, so a node that was slow once is re-probed instead of starved forever.
      const f = fresh[i]!;
      let ttfb = f > 0 ? reference + (node.ttfbEwmaMs - reference) * f : reference;
      if (ttfb < MIN_TTFB_MS) ttfb = MIN_TTFB_MS;
      const load = meanCost > 0 ? node.inFlightCost / meanCost : node.inFlight;
      const score = (ttfb * (1 + load)) / w;
      if (score < bestScore || (score === bestScore && node.inFlight < bestInFlight)) {
        best = i;
        bestScore = score;
        bestInFlight = node.inFlight;
      }
    }
    this.cursor = this.cursor + 1 === length ? 0 : this.cursor + 1;
    return best < 0 ? null : nodes[best]!;
  }
}

/**
 * Factory for the `least-response-time` kind. `decayMs` (default 10000) is the half-life used
 * both by `recordTtfb` (configure the session with the same value) and for fading stale averages.
 *
 * @example
 * const policy = createLeastResponseTime(members, { decayMs: 10_000 });
 * const node = policy.pick({ affinityKey: null, cost: 1200, affinityOutcome: 'none' }, []);
 */
export function createLeastResponseTime(
  members: readonly PoolMember[],
  options: BalanceOptions,
): BalancePolicy {
  return new LeastResponseTimePolicy(members, options);
}
