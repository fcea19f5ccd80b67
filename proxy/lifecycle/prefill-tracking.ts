/**
 * The session's side of the time-to-first-token signal: charging an attempt's prompt to its node's
 * prefill queue at dispatch, settling it at the first token (streams), the head (other answers) or
 * the attempt's end, and feeding the samples to the node's learned rates and the pool's hedging
 * windows (the latency histograms are the observability series', fed by the session). Keeps the bookkeeping out of the session's state machine.
 */
import { chargePrefill, recordFirstToken, recordHead, settlePrefill } from '../balance/node-timing.js';
import type { PickRequest } from '../balance/balance-policy.js';
import type { Pool } from '../pool/pool.js';
import type { Attempt } from './attempt.js';

/**
 * Called at dispatch with the request as the policy just left it. When the pool's policy scores
 * the prefill queue, charges the attempt's prefill work (its prompt less the prefix the policy
 * expects cached) to the node; copies the policy's estimates for `x-sluice-route` either way.
 */
export function trackPrefill(att: Attempt, pool: Pool, req: PickRequest): void {
  // HOT
  att.expectedTtftMs = req.expectedTtftMs;
  att.cachedTokens = req.cachedTokens;
  att.queuedMs = req.queuedMs;
  att.stallMs = req.stallMs;
  if (pool.policy.scoresPrefill !== true) return;
  const cached = req.cachedTokens > 0 ? req.cachedTokens : 0;
  let own = req.promptTokens - cached;
  if (own < 1) own = 1;
  att.prefillTokens = own;
  att.prefillAhead = chargePrefill(att.node, own);
}

/** Takes the attempt's work off its node's queue, once (first token, head, or end of the attempt). */
export function settleAttemptPrefill(att: Attempt): void {
  // HOT
  if (att.prefillTokens > 0) {
    settlePrefill(att.node, att.prefillTokens);
    att.prefillTokens = 0;
  }
}

/** The first event of a streamed attempt arrived at monotonic `nowMs`: one sample for its node and pool. */
export function firstTokenSample(att: Attempt, pool: Pool, nowMs: number): void {
  // HOT
  recordFirstToken(
    att.node,
    att.prefillTokens,
    att.prefillAhead,
    nowMs - att.startMs,
    nowMs,
    pool.ttfbHalfLifeMs,
  );
  att.prefillTokens = 0;
  pool.state.ttft?.add(nowMs - att.startMs);
}

/**
 * The head of an answer that is not a stream arrived at `nowMs` (a successful status): one head
 * sample for its node and pool; the attempt's prefill is over.
 */
export function headSample(att: Attempt, pool: Pool, nowMs: number): void {
  // HOT
  recordHead(att.node, att.prefillTokens, att.prefillAhead, nowMs - att.startMs, nowMs, pool.ttfbHalfLifeMs);
  att.prefillTokens = 0;
  pool.state.ttfb?.add(nowMs - att.startMs);
}

/**
 * The policy's estimates for `att` as `x-sluice-route` fields (`; expected_ttft_ms=…; queued_ms=…;
 * stall_ms=…; cached_tokens=…`, each only when the policy gave it), or ''.
 */
export function estimatesReport(att: Attempt): string {
  let out = '';
  if (att.expectedTtftMs >= 0) out += `; expected_ttft_ms=${Math.round(att.expectedTtftMs)}`;
  if (att.queuedMs >= 0) out += `; queued_ms=${Math.round(att.queuedMs)}`;
  if (att.stallMs >= 0) out += `; stall_ms=${Math.round(att.stallMs)}`;
  if (att.cachedTokens >= 0) out += `; cached_tokens=${Math.round(att.cachedTokens)}`;
  return out;
}
