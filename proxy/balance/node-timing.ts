/**
 * What Sluice has measured of one node's time to first token, kept on the node for the policies
 * that score by it: the prefill work of this instance's attempts still waiting for their first
 * token (the queue a new request joins), and how the node's time to first token grows with the
 * work a request finds ahead of it plus its own, learned separately from streamed first tokens
 * and from the heads of answers that are not streamed. The session records; policies only read.
 *
 * Each first token (or head) is one sample: x = the prefill work queued ahead of the attempt when
 * it was sent + its own + FIXED_WORK_TOKENS, y = its time to first token. `expected-ttft.ts` fits a
 * line `y = intercept + slope × x` through a node's decayed samples (the ratio through the origin
 * until the samples determine a line). Latency against the work found ahead, not throughput: an
 * engine that prefills several queued prompts in one step serves each of them sooner than their
 * tokens one after another would take, so a throughput rate learned on a busy node reads as a
 * faster node than an idle one of the same speed, and a policy scoring by it herds requests onto
 * whichever node happened to batch; the line's slope prices the work ahead at what it really
 * costs the request and its intercept what every request pays.
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
  /** Samples of time to first token (ms) against the work ahead and own (tokens), from streams. */
  readonly ttftRate = new DecayedRatio();
  /** The same from the heads of answers that are not streamed (their time includes the decode). */
  readonly headRate = new DecayedRatio();

  /** Requests waiting on the node that did not come from this instance, per the last scrape (0 unknown). */
  foreignWaiting(scrapedWaiting: number): number {
    // HOT
    if (scrapedWaiting <= 0) return 0;
    const foreign = scrapedWaiting - this.pendingAtScrape;
    return foreign > 0 ? foreign : 0;
  }
}

/**
 * Adds an attempt's prompt tokens to its node's prefill queue at dispatch; returns the work that
 * was queued ahead of it (tokens), which its sample is taken against.
 */
export function chargePrefill(node: UpstreamNode, tokens: number): number {
  // HOT
  const t = node.timing;
  const ahead = t.pendingTokens;
  t.pendingTokens += tokens;
  t.pendingCount++;
  return ahead;
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
 * A streamed answer's first token arrived at monotonic `nowMs`, `ttftMs` after its attempt was sent
 * to `node`: when the attempt was charged `tokens` of prefill (0: it was not) with `aheadTokens`
 * queued ahead of it, one sample for the node, after which its tokens leave the queue. (Its
 * latency goes to the observability series too, not from here.)
 */
export function recordFirstToken(
  node: UpstreamNode,
  tokens: number,
  aheadTokens: number,
  ttftMs: number,
  nowMs: number,
  halfLifeMs: number,
): void {
  // HOT
  record(node, node.timing.ttftRate, tokens, aheadTokens, ttftMs, nowMs, halfLifeMs);
}

/** Records the head of an answer that is not streamed, as `recordFirstToken` does a first token. */
export function recordHead(
  node: UpstreamNode,
  tokens: number,
  aheadTokens: number,
  headMs: number,
  nowMs: number,
  halfLifeMs: number,
): void {
  // HOT
  record(node, node.timing.headRate, tokens, aheadTokens, headMs, nowMs, halfLifeMs);
}

function record(
  node: UpstreamNode,
  series: DecayedRatio,
  tokens: number,
  aheadTokens: number,
  latencyMs: number,
  nowMs: number,
  halfLifeMs: number,
): void {
  // HOT
  if (tokens <= 0) return;
  series.add(latencyMs > 0 ? latencyMs : 0, aheadTokens + tokens + FIXED_WORK_TOKENS, nowMs, halfLifeMs);
  settlePrefill(node, tokens);
}
