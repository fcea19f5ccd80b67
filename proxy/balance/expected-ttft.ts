/**
 * The expected time to first token of a request on each member of a pool: the prefill work queued
 * ahead of it on the node plus its own, times the node's learned milliseconds per token of work.
 * Least-response-time scores with it directly and cache-aware trades it against the cached prefix,
 * so both read load through this one term. Per-pick state lives in typed arrays sized at build,
 * which the policies read directly (a double passed to or returned from a call that is not inlined
 * is boxed, an allocation); a pick reads no clock and allocates nothing.
 *
 *   expected(node) = base(node) + rate(node) × (queued(node) + own + FIXED_WORK_TOKENS)   ms
 *   queued(node)   = node.timing.pendingTokens                                        tokens
 *                  + max(0, scraped waiting − own attempts waiting then) × mean prompt
 *                  + max(0, −room(node))
 *   room(node)     = kvTokens − node.inFlightCost − cost                             tokens
 *
 * `rate` (ms per token of work) and `base` (ms) are the line fitted through the node's samples of
 * time to first token against the work each found ahead plus its own (`node-timing.ts`), or the
 * ratio through the origin (`base` 0) until the samples determine a line.
 *
 * The policies score a node by the estimate with the queued work counted `queueWeight` times
 * (least-response-time 4, cache-aware 1 by default):
 *
 *   score(node)    = (expected(node) + (queueWeight − 1) × rate(node) × queued(node)) / weight
 *
 * A request that joins a queue delays the requests that arrive behind it until the queue drains,
 * and a node whose prefill queue never empties runs every step at its token budget, slowing its
 * decodes and filling its KV cache with them; scored by its own wait alone (weight 1), each request
 * would fill the fastest node's queue until that wait equalled a slow node's idle prefill
 * (docs/balancing.md, "Queue weight").
 *
 * `room` is the KV cache the node has left once this request holds its prompt and answer
 * (`cost`) beside the attempts in flight. A node without room for it admits it only when in-flight
 * answers finish and free theirs; the missing tokens are counted as queued work, at the node's rate
 * (a node frees KV about as fast as it prefills: both scale with its speed).
 */
import { DEFAULT_KV_TOKENS } from './node-timing.js';
import { ratioSamples, type DecayedRatio } from './decayed-ratio.js';
import { DEFAULT_TTFB_HALF_LIFE_MS } from './ttfb-ewma.js';
import { FIXED_WORK_TOKENS } from './node-timing.js';
import { candidateWeight } from './member-table.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

// A module-local copy of an imported binding: optimised code reads an import through its module
// cell, checked for initialisation, at every use; a local constant is folded into the code.
const weightOf = candidateWeight;

/** Picks over which the running mean prompt size is averaged (count-based EWMA window). */
const PROMPT_WINDOW = 256;
/** Smallest rate used in estimates, ms per token, so that a 0 ms sample cannot cancel the queue. */
const MIN_RATE = 1e-6;

export class ExpectedTtft {
  private readonly nodes: readonly UpstreamNode[];
  private readonly halfLifeMs: number;
  /** Per slot, for the pick in progress: ms of time to first token per token of work. */
  readonly rate: Float64Array;
  /** Per slot, for the pick in progress: ms of time to first token that do not grow with the work. */
  readonly base: Float64Array;
  /** Per slot, for the pick in progress: prefill work queued ahead of a new request, tokens. */
  readonly queued: Float64Array;
  /** Per slot, for the pick in progress: KV tokens the node has left beside this request (may be < 0). */
  readonly room: Float64Array;
  /** KV-cache tokens per node (the pool's `cache_tokens`). */
  readonly kvTokens: number;
  /** Weight of a token of queued work against one of the request's own in the policies' scores (≥ 1). */
  readonly queueWeight: number;
  /** Scratch per slot: weight of the node's own rate against the pool reference (0 = unprobed). */
  private readonly fresh: Float64Array;
  /** Running mean of the prompt tokens of the requests placed, tokens; 0 before the first pick. */
  meanPromptTokens = 0;
  /** Mean of `queued` over the candidates of the pick in progress, tokens. */
  queuedMean = 0;
  /**
   * Which series the pick in progress reads: true when some candidate has streamed first
   * tokens (time to first token), false when only heads of answers that are not streamed are known.
   */
  fromStreams = false;
  /** False while no candidate has any sample: estimates are then in tokens, not ms. */
  probed = false;
  /** `ratioSamples.count` when the rates were last computed; -1: never. */
  private samplesSeen = -1;
  /** Which members were candidates then (a hash of the flags), since the reference depends on it. */
  private candidatesSeen = 0;

  /**
   * `nodes` are the policy's member slots; `halfLifeMs` fades a rate that stopped being refreshed;
   * `kvTokens` is each node's KV-cache capacity in tokens (default `DEFAULT_KV_TOKENS`);
   * `queueWeight` the weight of queued work in the scores (`queueWeight` if it is a number ≥ 1,
   * else `defaultQueueWeight`).
   */
  constructor(
    nodes: readonly UpstreamNode[],
    halfLifeMs: number | undefined,
    kvTokens: number | undefined,
    queueWeight: number | undefined,
    defaultQueueWeight: number,
  ) {
    this.nodes = nodes;
    this.queueWeight =
      queueWeight !== undefined && queueWeight >= 1 && queueWeight < Infinity
        ? queueWeight
        : defaultQueueWeight;
    this.kvTokens =
      kvTokens !== undefined && kvTokens > 0 && kvTokens < Infinity ? kvTokens : DEFAULT_KV_TOKENS;
    this.room = new Float64Array(nodes.length);
    this.halfLifeMs = halfLifeMs !== undefined && halfLifeMs > 0 ? halfLifeMs : DEFAULT_TTFB_HALF_LIFE_MS;
    this.rate = new Float64Array(nodes.length);
    this.base = new Float64Array(nodes.length);
    this.queued = new Float64Array(nodes.length);
    this.fresh = new Float64Array(nodes.length);
  }

  /**
   * Finds the candidates of one pick and prepares their estimates, in one pass over the members:
   * writes each slot's `candidateWeight` (`member-table.ts`: the gate every pick goes through;
   * 0 = not a candidate) for member weights `weights` and earlier attempts `tried` into
   * `candidates`, and returns how many there are. With none, nothing else changes. Else, for a
   * request of `promptTokens` and `cost` (prompt and answer, the KV it will hold): folds the request
   * into the mean prompt size, sets each member's KV room (`room`) and queued work (`queued`), then
   * each member's rate (`rate`).
   * A member without samples gets the pool's reference rate (a fair start); a member whose last
   * sample is older than the pool's newest fades toward it by `2^(−age / halfLife)`, so a node that
   * was slow once is probed again rather than starved. The reference is the mean of the
   * candidates' rates weighted by that freshness.
   * With no sample anywhere every rate is 1: the estimate is then the work queued, in tokens.
   * The rates are recomputed only when a sample arrived or the set of candidates changed since the
   * previous pick; otherwise a pick reuses them.
   */
  prepare(
    promptTokens: number,
    cost: number,
    weights: Float64Array,
    tried: readonly UpstreamNode[],
    candidates: Float64Array,
  ): number {
    // HOT
    // The mean with this request folded in; kept only if the pick has a candidate. One arithmetic
    // expression (the first request sets the mean: divisor 1), not a choice between the tagged
    // argument and a double, which the compiler boxes into a heap number per call.
    const m = this.meanPromptTokens;
    const mean = promptTokens > 0 ? m + (promptTokens - m) / (m === 0 ? 1 : PROMPT_WINDOW) : m;
    const nodes = this.nodes;
    const n = nodes.length;
    const queued = this.queued;
    const rooms = this.room;
    const kv = this.kvTokens;
    let flags = 0;
    let sum = 0;
    let count = 0;
    for (let i = 0; i < n; i++) {
      const node = nodes[i]!;
      const w = weightOf(node, weights[i]!, tried);
      candidates[i] = w;
      const t = node.timing;
      const room = kv - node.inFlightCost - cost;
      rooms[i] = room;
      const q = t.pendingTokens + t.foreignWaiting(node.scrapedWaiting) * mean + (room < 0 ? -room : 0);
      queued[i] = q;
      const ok = w > 0;
      if (ok) {
        sum += q;
        count++;
      }
      flags = (Math.imul(flags, 31) + (ok ? 1 : 2)) | 0;
    }
    if (count === 0) return 0;
    this.meanPromptTokens = mean;
    this.queuedMean = sum / count;
    if (ratioSamples.count === this.samplesSeen && flags === this.candidatesSeen) return count;
    this.samplesSeen = ratioSamples.count;
    this.candidatesSeen = flags;
    this.computeRates(candidates);
    return count;
  }

  private computeRates(candidates: Float64Array): void {
    const nodes = this.nodes;
    const n = nodes.length;
    let streams = false;
    for (let i = 0; i < n; i++) {
      const node = nodes[i]!;
      if (node.timing.ttftRate.sumX > 0 && candidates[i]! > 0) {
        streams = true;
        break;
      }
    }
    this.fromStreams = streams;
    // Ages are measured from the pool's newest sample, not the clock: while the pool is idle nobody
    // learns anything, so nobody's rate goes stale.
    let newest = -Infinity;
    for (let i = 0; i < n; i++) {
      const node = nodes[i]!;
      const s = series(node, streams);
      if (s.sumX > 0 && s.updatedMs > newest && candidates[i]! > 0) newest = s.updatedMs;
    }
    const fresh = this.fresh;
    const rate = this.rate;
    const base = this.base;
    const halfLife = this.halfLifeMs;
    let sumFresh = 0;
    let sumFreshRate = 0;
    let sumFreshBase = 0;
    for (let i = 0; i < n; i++) {
      const node = nodes[i]!;
      const s = series(node, streams);
      let f = 0;
      if (s.sumX > 0 && candidates[i]! > 0) {
        const age = newest - s.updatedMs;
        f = age > 0 ? Math.pow(2, -age / halfLife) : 1;
        // One fit serves both (perUnit and base would each fit it again).
        const slope = s.lineSlope();
        const r = slope > 0 ? slope : s.value();
        const b = slope > 0 ? s.lineIntercept(slope) : 0;
        rate[i] = r;
        base[i] = b;
        sumFresh += f;
        sumFreshRate += f * r;
        sumFreshBase += f * b;
      }
      fresh[i] = f;
    }
    this.probed = sumFresh > 0;
    const reference = sumFresh > 0 ? sumFreshRate / sumFresh : 1;
    const referenceBase = sumFresh > 0 ? sumFreshBase / sumFresh : 0;
    for (let i = 0; i < n; i++) {
      const f = fresh[i]!;
      let r = f > 0 ? reference + (rate[i]! - reference) * f : reference;
      if (r < MIN_RATE) r = MIN_RATE;
      rate[i] = r;
      base[i] = f > 0 ? referenceBase + (base[i]! - referenceBase) * f : referenceBase;
    }
  }

  /**
   * Expected time to first token, ms (tokens while not `probed`), of a request whose prefill is
   * `ownTokens` on slot `i`, after `prepare`. For tests and diagnostics: policies compute
   * `base[i] + rate[i] × (queued[i] + own + FIXED_WORK_TOKENS)` inline.
   */
  estimate(i: number, ownTokens: number): number {
    return this.base[i]! + this.rate[i]! * (this.queued[i]! + ownTokens + FIXED_WORK_TOKENS);
  }
}

function series(node: UpstreamNode, streams: boolean): DecayedRatio {
  // HOT
  return streams ? node.timing.ttftRate : node.timing.headRate;
}
