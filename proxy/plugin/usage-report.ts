/**
 * Reads the `usage` object a node reported from the last chunks of its answer (the end of a JSON
 * body, or the final events of a stream with usage) for the onDone phase. Runs once per request,
 * only on routes with onDone hooks; the body itself is never parsed.
 */
import type { Usage } from '../../plugins/api.js';

const PROMPT = /"prompt_tokens"\s*:\s*(\d+)/;
const COMPLETION = /"completion_tokens"\s*:\s*(\d+)/;
const TOTAL = /"total_tokens"\s*:\s*(\d+)/;
/** Bytes read from each chunk's end: usage is a small object near the end. */
const WINDOW = 4096;

/** The last usage report in the chunks (oldest first, nulls skipped), or null when there is none. */
export function usageReport(a: Buffer | null, b: Buffer | null, c: Buffer | null): Usage | null {
  let text = '';
  for (const x of [a, b, c]) {
    if (x !== null) text += x.toString('latin1', Math.max(0, x.length - WINDOW));
  }
  const at = text.lastIndexOf('"usage"');
  if (at < 0) return null;
  const rest = text.slice(at);
  const p = PROMPT.exec(rest);
  const q = COMPLETION.exec(rest);
  const t = TOTAL.exec(rest);
  if (p === null && q === null && t === null) return null;
  const prompt = Number(p?.[1] ?? 0);
  const completion = Number(q?.[1] ?? 0);
  return { prompt, completion, total: t === null ? prompt + completion : Number(t[1]) };
}
