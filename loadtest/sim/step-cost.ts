/**
 * The price of one engine step in model milliseconds: the latency model's formulas in one place,
 * pure, so they can be checked against the published figures they were fitted to. Scheduling
 * (which sequences are in the step) is the engine's job.
 */

import type { SimProfile } from './profile.js';

/** What one step computes. */
export interface StepWork {
  /** Uncached prompt tokens prefilled in this step (all sequences together). */
  prefillTokens: number;
  /** Sequences decoding in this step (B). */
  decoders: number;
  /** Sum of the decoding sequences' context lengths (prompt + generated), tokens. */
  decodeContextTokens: number;
}

/**
 * Model milliseconds of one step, before time scaling:
 *
 * ```
 *   prefill_fixed_ms + prefill_tokens × 1000 / prefill_tokens_per_s               if prefill_tokens > 0
 * + decode_base_ms + B × (decode_per_seq_ms + decode_per_ctx_token_ms × avg_ctx)    if B > 0
 * ```
 *
 * Prefill and decode share the step (chunked prefill), so a prefill delays the running batch's next
 * token by its own cost. Returns 0 for an empty step.
 */
export function stepCostMs(p: SimProfile, w: StepWork): number {
  let ms = 0;
  if (w.prefillTokens > 0) ms += p.prefill_fixed_ms + (w.prefillTokens * 1000) / p.prefill_tokens_per_s;
  if (w.decoders > 0) {
    // B × per_ctx × avg_ctx = per_ctx × total context.
    ms +=
      p.decode_base_ms + w.decoders * p.decode_per_seq_ms + p.decode_per_ctx_token_ms * w.decodeContextTokens;
  }
  return ms;
}
