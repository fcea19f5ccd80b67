/**
 * Token accounting for the tokens-per-minute limit: the estimate debited when a request is admitted
 * (prompt characters / 4, plus the completion budget it asks for) and the real count read from the
 * `usage` object a node returns, which the limiter reconciles against the estimate. Estimates only
 * need to be in the right range; reconciliation makes the books exact.
 */

/** What a request is expected to cost, in tokens. */
export interface TokenEstimate {
  /** Estimated prompt tokens: ceil(characters of prompt text / 4), token-id arrays counted exactly. */
  prompt: number;
  /** Completion budget: `max_completion_tokens`, `max_tokens` or `max_output_tokens` (× `n`), else the default. */
  maxTokens: number;
}

/** Completion budget assumed when a chat or completions request sets no maximum, tokens. */
export const DEFAULT_MAX_TOKENS = 1024;

/** Characters per token of the estimate (the usual rule of thumb for English text with BPE tokenizers). */
const CHARS_PER_TOKEN = 4;
/** Nesting depth the prompt walk follows (messages → content parts → text). */
const MAX_DEPTH = 6;

/**
 * Estimates a request's token cost from its parsed JSON body.
 * - Prompt: text of chat `messages` (string contents, text parts, tool-call arguments), `prompt`
 *   (string, strings, or token-id arrays), `input` (same, or Responses-style message objects) and
 *   `instructions`; characters / 4, rounded up; a token id counts as one token.
 * - Completion: `max_completion_tokens`, else `max_tokens`, else `max_output_tokens`, times `n`
 *   when `n > 1`. Without any of them, `defaultMaxTokens` for requests that generate (`messages` or
 *   `prompt`) and 0 for `input`-only bodies (embeddings; a Responses call without
 *   `max_output_tokens` is then charged its completion at reconciliation).
 * A body that is not a JSON object costs nothing.
 *
 * @example
 * estimateRequestTokens({ messages: [{ role: 'user', content: 'hello world!' }], max_tokens: 50 });
 * // { prompt: 3, maxTokens: 50 }
 */
export function estimateRequestTokens(body: unknown, defaultMaxTokens = DEFAULT_MAX_TOKENS): TokenEstimate {
  // HOT
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { prompt: 0, maxTokens: 0 };
  const b = body as Record<string, unknown>;
  const generates = b['messages'] !== undefined || b['prompt'] !== undefined;
  const units =
    textUnits(b['messages'], 0) +
    textUnits(b['prompt'], 0) +
    textUnits(b['input'], 0) +
    textUnits(b['instructions'], 0);
  // A 0 is no cap to the servers (`max_completion_tokens or max_tokens` in SGLang): it reads as absent.
  const explicit =
    positiveCount(b['max_completion_tokens']) ??
    positiveCount(b['max_tokens']) ??
    positiveCount(b['max_output_tokens']);
  let maxTokens = explicit ?? (generates ? defaultMaxTokens : 0);
  const n = wholeCount(b['n']);
  if (n !== null && n > 1) maxTokens *= n;
  return { prompt: Math.ceil(units / CHARS_PER_TOKEN), maxTokens };
}

/**
 * Total tokens from a response's `usage` object (chat/completions `total_tokens` or
 * `prompt_tokens + completion_tokens`; Responses `input_tokens + output_tokens`), or null when it
 * carries no usable count. For streams, pass the `usage` of the final chunk.
 */
export function usageTokens(usage: unknown): number | null {
  if (typeof usage !== 'object' || usage === null) return null;
  const u = usage as Record<string, unknown>;
  const total = nonNegative(u['total_tokens']);
  if (total !== null) return total;
  const prompt = nonNegative(u['prompt_tokens']) ?? nonNegative(u['input_tokens']);
  const completion = nonNegative(u['completion_tokens']) ?? nonNegative(u['output_tokens']);
  if (prompt === null && completion === null) return null;
  return (prompt ?? 0) + (completion ?? 0);
}

/** Characters of prompt text in `v` (a token id counts as CHARS_PER_TOKEN characters). */
function textUnits(v: unknown, depth: number): number {
  if (typeof v === 'string') return v.length;
  if (typeof v === 'number') return CHARS_PER_TOKEN;
  if (depth >= MAX_DEPTH || typeof v !== 'object' || v === null) return 0;
  if (Array.isArray(v)) {
    let sum = 0;
    for (let i = 0; i < v.length; i++) sum += textUnits(v[i], depth + 1);
    return sum;
  }
  const o = v as Record<string, unknown>;
  let sum = 0;
  if (o['content'] !== undefined) sum += textUnits(o['content'], depth + 1);
  if (typeof o['text'] === 'string') sum += o['text'].length;
  const calls = o['tool_calls'];
  if (Array.isArray(calls)) {
    for (let i = 0; i < calls.length; i++) {
      const fn = (calls[i] as { function?: { arguments?: unknown } } | null)?.function;
      if (typeof fn?.arguments === 'string') sum += fn.arguments.length;
    }
  }
  return sum;
}

/** A finite non-negative number, rounded up; else null. */
function wholeCount(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.ceil(v) : null;
}

function positiveCount(v: unknown): number | null {
  const c = wholeCount(v);
  return c !== null && c > 0 ? c : null;
}

function nonNegative(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null;
}
