/**
 * Reads the token `usage` a node reported from the last chunks of its response (the end of a JSON
 * body, or the final SSE events of a stream with usage), without parsing or copying the body while
 * it streams. Used to reconcile a tenant's token pre-debit.
 */

const TOTAL = /"total_tokens"\s*:\s*(\d+)/;
const PROMPT = /"prompt_tokens"\s*:\s*(\d+)/;
const COMPLETION = /"completion_tokens"\s*:\s*(\d+)/;

/**
 * Total tokens of the last `"usage"` object found in the given chunks (oldest first; nulls
 * skipped), or -1 when there is none: `total_tokens`, else prompt + completion.
 */
export function parseUsageTokens(a: Buffer | null, b: Buffer | null, c: Buffer | null): number {
  let text = '';
  if (a !== null) text += a.toString('latin1');
  if (b !== null) text += b.toString('latin1');
  if (c !== null) text += c.toString('latin1');
  const at = text.lastIndexOf('"usage"');
  if (at < 0) return -1;
  const rest = text.slice(at);
  const total = TOTAL.exec(rest);
  if (total !== null) return Number(total[1]);
  const p = PROMPT.exec(rest);
  const q = COMPLETION.exec(rest);
  if (p === null && q === null) return -1;
  return Number(p?.[1] ?? 0) + Number(q?.[1] ?? 0);
}
