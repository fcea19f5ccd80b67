/**
 * Reads the token `usage` a node reported from the last chunks of its response (the end of a JSON
 * body, or the final SSE events of a stream with usage), without parsing or copying the body while
 * it streams. Used to reconcile a tenant's token pre-debit.
 */

const USAGE = Buffer.from('"usage"');
const TOTAL = /"total_tokens"\s*:\s*(\d+)/;
const PROMPT = /"prompt_tokens"\s*:\s*(\d+)/;
const COMPLETION = /"completion_tokens"\s*:\s*(\d+)/;

/**
 * Total tokens of the last `"usage"` object found in the given chunks (oldest first; nulls
 * skipped), or -1 when there is none: `total_tokens`, else prompt + completion.
 */
export function parseUsageTokens(a: Buffer | null, b: Buffer | null, c: Buffer | null): number {
  // Look in the newest chunk first; decode only from the last "usage" on (usage is a small object
  // near the end of a body or in the final event of a stream).
  for (const [x, y] of [
    [c, null],
    [b, c],
    [a, b],
  ] as const) {
    if (x === null) continue;
    const at = x.lastIndexOf(USAGE);
    if (at < 0) continue;
    const rest =
      x.toString('latin1', at) + (y === null ? '' : y.toString('latin1', 0, Math.min(y.length, 512)));
    return usageIn(rest);
  }
  return -1;
}

function usageIn(rest: string): number {
  const total = TOTAL.exec(rest);
  if (total !== null) return Number(total[1]);
  const p = PROMPT.exec(rest);
  const q = COMPLETION.exec(rest);
  if (p === null && q === null) return -1;
  return Number(p?.[1] ?? 0) + Number(q?.[1] ?? 0);
}
