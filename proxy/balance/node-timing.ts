/**
 * What Sluice has measured of one node's time to first token, kept on the node for the policies
 * that score by it: the prefill work of this instance's attempts still waiting for their first
 * token (the queue a new request joins), and the node's learned service rate, how many
 * milliseconds it takes per token of that work, learned separately from streamed first tokens and
 * from the heads of answers that are not streamed. The session records; policies only read.
 *
 * The rate is measured as throughput while the queue is not empty: each first token (or head)
 * that ends a piece of queued work adds `(time since the previous one, or since the queue became
 * non-empty) / (its prompt tokens + FIXED_WORK_TOKENS)` to a decayed ratio. So prompts that a node
 * prefills together in one batch share the batch's time, and a node's rate does not depend on how
 * deep its queue was when each request joined it.
 */
import { DecayedRatio } from './decayed-ratio.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/**
 * Tokens of work added to every sample and every estimate for the per-request cost that does not
 * grow with the prompt (the engine's step overhead, the HTTP exchange), so that a short prompt on an
 * idle node neither divides by almost nothing when learned nor estimates almost nothing when
 * scored. The calibrated profiles' fixed prefill time is worth 170–340 tokens; a smaller value keeps
 * shares close to the weights at light load, where a constant term favours the heaviest node.
 */
export const FIXED_WORK_TOKENS = 128;

/**
 * KV-cache capacity assumed per node when the pool does not set `cache_tokens`, tokens: vLLM's KV
 * pool for an 8B model on one 80 GB GPU (it logs `GPU KV cache size: 410,128 tokens`).
 */
export const DEFAULT_KV_TOKENS = 400_000;

export class NodeTiming {
  /**
   * Prompt tokens of this instance's attempts on the node that have no first token yet (streams)
   * or no head yet (answers that are not streamed): the prefill queue Sluice itself put there.
   */
  pendingTokens = 0;
  /** Attempts counted in `pendingTokens`. */
  pendingCount = 0;
  /**
   * `pendingCount` when the node's metrics were last scraped, so that the scraped waiting count
   * can be corrected for the part of it that is this instance's own (see `foreignWaiting`).
   */
  pendingAtScrape = 0;
  /**
   * Monotonic time from which the next sample's interval runs, ms: when the queue last became
   * non-empty, or the last sample, whichever is later.
   */
  markMs = 0;
  /** ms per token of work (prompt + FIXED_WORK_TOKENS) while the queue is busy, from streamed first tokens. */
  readonly ttftRate = new DecayedRatio();
  /** The same from the heads of answers that are not streamed (their work includes the decode). */
  readonly headRate = new DecayedRatio();

  /** Requests waiting on the node that did not come from this instance, per the last scrape (0 unknown). */
  foreignWaiting(scrapedWaiting: number): number {
    // HOT
    if (scrapedWaiting <= 0) return 0;
    const foreign = scrapedWaiting - this.pendingAtScrape;
    return foreign > 0 ? foreign : 0;
  }
}

/** Adds an attempt's prompt tokens to its node's prefill queue at dispatch (monotonic `nowMs`). */
export function chargePrefill(node: UpstreamNode, tokens: number, nowMs: number): void {
  // HOT
  const t = node.timing;
  if (t.pendingCount === 0) t.markMs = nowMs;
  t.pendingTokens += tokens;
  t.pendingCount++;
}

/** Takes an attempt's prompt tokens off its node's prefill queue without a sample (cancelled, failed). */
export function settlePrefill(node: UpstreamNode, tokens: number): void {
  // HOT
  const t = node.timing;
  t.pendingTokens -= tokens;
  t.pendingCount--;
  // Sums of integers are exact here; the guard only keeps a bug from going negative forever.
  if (t.pendingCount <= 0) {
    t.pendingCount = 0;
    t.pendingTokens = 0;
  }
}

/**
 * A streamed answer's first token arrived at monotonic `nowMs` on `node`: when the attempt was
 * charged `tokens` of queued prefill (0: it was not), one service-rate sample ending then, after
 * which its tokens leave the queue. (Its latency goes to the observability series, not here.)
 */
export function recordFirstToken(
  node: UpstreamNode,
  tokens: number,
  nowMs: number,
  halfLifeMs: number,
): void {
  // HOT
  record(node, node.timing.ttftRate, tokens, nowMs, halfLifeMs);
}

/** Records the head of an answer that is not streamed, as `recordFirstToken` does a first token. */
export function recordHead(node: UpstreamNode, tokens: number, nowMs: number, halfLifeMs: number): void {
  // HOT
  record(node, node.timing.headRate, tokens, nowMs, halfLifeMs);
}

function record(
  node: UpstreamNode,
  rate: DecayedRatio,
  tokens: number,
  nowMs: number,
  halfLifeMs: number,
): void {
  // HOT
  if (tokens <= 0) return;
  const t = node.timing;
  const interval = nowMs - t.markMs;
  rate.add(interval > 0 ? interval : 0, tokens + FIXED_WORK_TOKENS, nowMs, halfLifeMs);
  t.markMs = nowMs;
  settlePrefill(node, tokens);
}
