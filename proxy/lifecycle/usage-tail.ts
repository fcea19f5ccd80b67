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

/** How far past a `"usage"` key its counts are looked for, bytes. */
const READ_ON = 512;
/** Bytes of a key cut by a chunk boundary that can sit at the end of the earlier chunk. */
const KEY_EDGE = USAGE.length - 1;

/**
 * Total tokens of the last `"usage"` object found in the given chunks (oldest first; nulls
 * skipped), or -1 when there is none: `total_tokens`, else prompt + completion. The object may
 * be cut anywhere by the chunk boundaries, its key included.
 */
export function parseUsageTokens(a: Buffer | null, b: Buffer | null, c: Buffer | null): number {
  // A missing chunk is no boundary between its neighbours: shift the chunks that are there to the
  // newest end (x oldest, z newest), so that a key cut by a boundary is read across it.
  let x = a;
  let y = b;
  let z = c;
  if (z === null) {
    z = y;
    y = x;
    x = null;
  }
  if (z === null) {
    z = y;
    y = null;
  }
  if (y === null) {
    y = x;
    x = null;
  }
  if (z === null) return -1;
  // The newest chunk first: usage is a small object near the end of a body or in the final event
  // of a stream.
  let n = usageAt(z, '');
  if (n === NOT_FOUND && y !== null) n = usageAt(y, readOn(z, null));
  if (n === NOT_FOUND && x !== null && y !== null) n = usageAt(x, readOn(y, z));
  return n === NOT_FOUND ? -1 : n;
}

/** The first READ_ON bytes that follow a chunk (`n1`, then `n2`), as latin1 text. */
function readOn(n1: Buffer | null, n2: Buffer | null): string {
  if (n1 === null) return '';
  const first = n1.toString('latin1', 0, Math.min(n1.length, READ_ON));
  if (n2 === null || first.length >= READ_ON) return first;
  return first + n2.toString('latin1', 0, Math.min(n2.length, READ_ON - first.length));
}

/**
 * The usage total read from the last `"usage"` key that starts in `x` (a key cut by the end of `x`
 * is the last one), continued into `next` (the text that follows `x`); -1 when it holds no token
 * count, NOT_FOUND without `"usage"`.
 */
function usageAt(x: Buffer, next: string): number {
  let rest: string;
  const tail = Math.min(x.length, KEY_EDGE);
  const edge = x.toString('latin1', x.length - tail) + next.slice(0, KEY_EDGE);
  const cut = edge.indexOf('"usage"');
  if (cut >= 0 && cut < tail) rest = x.toString('latin1', x.length - tail + cut) + next;
  else {
    const at = x.lastIndexOf(USAGE);
    if (at < 0) return NOT_FOUND;
    rest = x.toString('latin1', at) + next;
  }
  const total = TOTAL.exec(rest);
  if (total !== null) return Number(total[1]);
  const p = PROMPT.exec(rest);
  const q = COMPLETION.exec(rest);
  if (p === null && q === null) return -1;
  return Number(p?.[1] ?? 0) + Number(q?.[1] ?? 0);
}
