/**
 * Reads the token `usage` a node reported from the end of its response (the end of a JSON body, or
 * the final SSE events of a stream with usage), without parsing the body while it streams. Used to
 * reconcile a tenant's token pre-debit. The newest chunk is kept by reference; the bytes before it
 * are copied into a small ring (`BodyTail`), so that keep-alive comments after the usage event or a
 * usage event cut into many small reads are still read.
 */

const USAGE = Buffer.from('"usage"');
/*
 * A count has at most 9 digits (under a billion tokens): a node that reports more is broken, and
 * charging its number would lock the tenant out for ages. Such a count reads as no count.
 */
const TOTAL = /"total_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;
const PROMPT = /"prompt_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;
const COMPLETION = /"completion_tokens"\s*:\s*(\d{1,9})(?![\d.eE])/;

/**
 * Bytes kept before a body's newest chunk. The usage event (about 200 bytes) may be followed by
 * `data: [DONE]` and keep-alive comments, or cut into many reads by the hops before Sluice; a usage
 * that ends more than this far before the newest chunk is not read.
 */
export const TAIL_BYTES = 2048;

/**
 * The last TAIL_BYTES bytes of a body before its newest chunk, copied into a ring as the body
 * streams (created on a response's second chunk; a body of one chunk costs nothing).
 */
export class BodyTail {
  // Its own memory, not a slice of Node's shared pool: a long stream would pin the pool's slab.
  private readonly ring = Buffer.allocUnsafeSlow(TAIL_BYTES);
  /** Where the next byte goes. */
  private pos = 0;
  /** Bytes held (TAIL_BYTES once the ring wrapped). */
  private filled = 0;

  /** Appends a chunk that is no longer the newest. */
  keep(b: Buffer): void {
    // HOT
    const ring = this.ring;
    const n = b.length;
    if (n >= TAIL_BYTES) {
      b.copy(ring, 0, n - TAIL_BYTES);
      this.pos = 0;
      this.filled = TAIL_BYTES;
      return;
    }
    const first = Math.min(n, TAIL_BYTES - this.pos);
    b.copy(ring, this.pos, 0, first);
    if (first < n) b.copy(ring, 0, first);
    this.pos = (this.pos + n) % TAIL_BYTES;
    this.filled = Math.min(TAIL_BYTES, this.filled + n);
  }

  /** The kept bytes in two pieces, oldest first (the first is empty until the ring wrapped). */
  parts(): [Buffer, Buffer] {
    const ring = this.ring;
    if (this.filled < TAIL_BYTES) return [ring.subarray(0, 0), ring.subarray(0, this.filled)];
    // Wrapped: the oldest byte is at pos.
    return [ring.subarray(this.pos), ring.subarray(0, this.pos)];
  }

  /** Total tokens of the last usage found in the kept bytes followed by `newest`; -1 for none. */
  tokens(newest: Buffer | null): number {
    const [older, old] = this.parts();
    return parseUsageTokens(older, old, newest);
  }
}

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
