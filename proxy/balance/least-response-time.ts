/**
 * Least response time, measured where a GPU's latency shows: the candidate with the lowest expected
 * time to first token per unit of weight. The expectation (`expected-ttft.ts`) is the prefill work
 * queued ahead of the request on the node plus its own prompt, at the node's learned milliseconds
 * per token, so a node that is four times slower is seen as such from its first samples, without
 * weights. Reads node fields only; the session records the samples and the queue.
 */
import type { BalanceOptions, BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { ExpectedTtft } from './expected-ttft.js';
import { MemberTable } from './member-table.js';
import { FIXED_WORK_TOKENS } from './node-timing.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

// A module-local copy of an imported binding: optimised code reads an import through its module
// cell, checked for initialisation, at every use; a local constant is folded into the code.
const FIXED_TOKENS = FIXED_WORK_TOKENS;

/**
 * Default weight of a token of prefill queued ahead against one of the request's own: scored by
 * its own expected wait alone, each request would fill the fastest node's queue until that wait
 * equalled a slow node's idle prefill (docs/balancing.md, "Queue weight").
 */
export const DEFAULT_LRT_QUEUE_WEIGHT = 4;

/** Least-response-time over a fixed member list. */
export class LeastResponseTimePolicy implements BalancePolicy {
  readonly kind = 'least-response-time';
  readonly weighsCost = true;
  readonly scoresPrefill = true;
  private readonly table: MemberTable;
  private readonly expected: ExpectedTtft;
  /** Scratch per slot for the pick in progress: effective weight (0 = not a candidate). */
  private readonly candidate: Float64Array;
  /** Slot the next scan starts at, so members with equal scores take turns. */
  private cursor = 0;

  constructor(members: readonly PoolMember[], options: BalanceOptions) {
    this.table = new MemberTable(members);
    this.expected = new ExpectedTtft(
      this.table.nodes,
      options.decayMs,
      options.cacheTokens,
      options.queueWeight,
      DEFAULT_LRT_QUEUE_WEIGHT,
    );
    this.candidate = new Float64Array(this.table.length);
  }

  /**
   * The candidate with the lowest expected time to first token, its queued work counted
   * `queueWeight` times, per unit of `weight × weightFactor`; null when there is none. Ties: fewer
   * attempts in flight, then the next in turn. Writes the winner's (unweighted) estimate to
   * `req.expectedTtftMs`. See `docs/balancing.md` for the estimate and its fallbacks.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const { nodes, length } = this.table;
    if (length === 0) return null;
    const cand = this.candidate;
    const expected = this.expected;
    const own = req.promptTokens;
    if (expected.prepare(own, req.cost, this.table.weights, tried, cand) === 0) return null;

    const rate = expected.rate;
    const base = expected.base;
    const queued = expected.queued;
    // Queued work counts queueWeight times in the score (expected-ttft.ts), once in the estimate.
    const extra = expected.queueWeight - 1;
    let best = -1;
    let bestScore = Infinity;
    let bestEstimate = 0;
    let bestInFlight = 0;
    let i = this.cursor;
    for (let k = 0; k < length; k++, i = i + 1 === length ? 0 : i + 1) {
      const w = cand[i]!;
      if (w === 0) continue;
      const node = nodes[i]!;
      const estimate = base[i]! + rate[i]! * (queued[i]! + own + FIXED_TOKENS);
      const score = (estimate + extra * rate[i]! * queued[i]!) / w;
      if (score < bestScore || (score === bestScore && node.inFlight < bestInFlight)) {
        best = i;
        bestScore = score;
        bestEstimate = estimate;
        bestInFlight = node.inFlight;
      }
    }
    this.cursor = this.cursor + 1 === length ? 0 : this.cursor + 1;
    req.expectedTtftMs = expected.probed ? bestEstimate : -1;
    return best < 0 ? null : nodes[best]!;
  }
}

/**
 * Factory for the `least-response-time` kind. `decayMs` (default 10000) is the half-life of the
 * learned prefill rates' samples (configure the pool with the same `decay_ms` the session uses);
 * `cacheTokens` (default 400000) each node's KV capacity, beyond which in-flight work delays a new
 * request's admission (`expected-ttft.ts`).
 *
 * @example
 * const policy = createLeastResponseTime(members, { decayMs: 10_000 });
 * const req = { affinityKey: null, cost: 1200, promptTokens: 1000, affinityOutcome: 'none', expectedTtftMs: -1, cachedTokens: -1 };
 * const node = policy.pick(req, []); // req.expectedTtftMs: its expected time to first token
 */
export function createLeastResponseTime(
  members: readonly PoolMember[],
  options: BalanceOptions,
): BalancePolicy {
  return new LeastResponseTimePolicy(members, options);
}
