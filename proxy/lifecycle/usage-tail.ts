/**
 * Reads the token `usage` a node reported from the last chunks of its response (the end of a JSON
 * body, or the final SSE events of a stream with usage), without parsing or copying the body while
 * it streams. Used to reconcile a tenant's token pre-debit.
 */

const USAGE = Buffer.from('"usage"');
/*
 * A count has at most 9 digits (under a billion tokens): a node that reports more is broken, and
 * charging its number would lock the tenant out for ages. Such a count reads as no count.
 */
const TOTAL = /"total_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;
const PROMPT = /"prompt_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;
const COMPLETION = /"completion_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;

/** `usageAt` found no `"usage"` in its chunk. */
const NOT_FOUND = -2;

/**
 * Total tokens of the last `"usage"` object found in the given chunks (oldest first; nulls
 * skipped), or -1 when there is none: `total_tokens`, else prompt + completion.
 */
export function parseUsageTokens(a: Buffer | null, b: Buffer | null, c: Buffer | null): number {
  // The newest chunk first: usage is a small object near the end of a body or in the final event
  // of a stream.
  let n = usageAt(c, null);
  if (n === NOT_FOUND) n = usageAt(b, c);
  if (n === NOT_FOUND) n = usageAt(a, b);
  return n === NOT_FOUND ? -1 : n;
}

/**
 * The usage total read from the last `"usage"` in `x` on, continued into the start of `next` (the
 * object may straddle two chunks); -1 when it holds no token count, NOT_FOUND without `"usage"`.
 */
function usageAt(x: Buffer | null, next: Buffer | null): number {
  if (x === null) return NOT_FOUND;
  const at = x.lastIndexOf(USAGE);
  if (at < 0) return NOT_FOUND;
  let rest = x.toString('latin1', at);
  if (next !== null) rest += next.toString('latin1', 0, Math.min(next.length, 512));
  const total = TOTAL.exec(rest);
  if (total !== null) return Number(total[1]);
  const p = PROMPT.exec(rest);
  const q = COMPLETION.exec(rest);
  if (p === null && q === null) return -1;
  return Number(p?.[1] ?? 0) + Number(q?.[1] ?? 0);
}
