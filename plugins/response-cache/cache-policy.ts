/**
 * The in-process answer stores of response-cache, bounded in bytes, with entries that expire after
 * a TTL. Two eviction policies behind one interface:
 * - `lru`: drop the least recently used entry;
 * - `cost-aware`: GreedyDual-Size-Frequency. Each entry has a priority
 *   `H = L + hits × compute_ms / size_bytes`, where L is the priority of the last entry evicted (it
 *   rises over time, so entries that are not used again age out: recency), `hits` counts uses
 *   (frequency) and `compute_ms` is how long the node took to produce the answer (cost). The entry
 *   with the lowest H goes first: cheap, large, rarely used and old answers before expensive, small,
 *   popular ones.
 */

/** One cached answer. */
export interface CacheEntry {
  /** The complete answer body (JSON). */
  body: string;
  /** How long the node took to produce it, ms. */
  costMs: number;
  /** Epoch ms after which it is stale. */
  expiresAt: number;
  /**
   * True for a stream folded without a usage event (its client did not ask for one): it serves
   * only streams that do not ask for usage either. Absent otherwise.
   */
  noUsage?: boolean;
}

/** What both policies offer. */
export interface AnswerStore {
  readonly policy: 'lru' | 'cost-aware';
  /** The live entry for `key` (counts a use), or undefined. */
  get(key: string, nowMs: number): CacheEntry | undefined;
  /** Stores an entry; returns false when it is larger than the whole store. */
  set(key: string, entry: CacheEntry): boolean;
  /** Bytes held (bodies, keys and a fixed overhead per entry). */
  readonly bytes: number;
  readonly size: number;
  /** Entries dropped to make room (not expiries). */
  readonly evictions: number;
}

/** Bookkeeping bytes counted per entry besides its key and body. */
const ENTRY_OVERHEAD = 96;

function sizeOf(key: string, e: CacheEntry): number {
  return ENTRY_OVERHEAD + key.length + e.body.length;
}

/** Least recently used. */
export class LruStore implements AnswerStore {
  readonly policy = 'lru';
  bytes = 0;
  evictions = 0;
  private readonly map = new Map<string, CacheEntry>();

  constructor(private readonly maxBytes: number) {}

  get size(): number {
    return this.map.size;
  }

  get(key: string, nowMs: number): CacheEntry | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    this.map.delete(key);
    if (e.expiresAt <= nowMs) {
      this.bytes -= sizeOf(key, e);
      return undefined;
    }
    this.map.set(key, e);
    return e;
  }

  set(key: string, entry: CacheEntry): boolean {
    const size = sizeOf(key, entry);
    if (size > this.maxBytes) return false;
    const old = this.map.get(key);
    if (old !== undefined) {
      this.map.delete(key);
      this.bytes -= sizeOf(key, old);
    }
    while (this.bytes + size > this.maxBytes) {
      const first = this.map.entries().next();
      if (first.done === true) break;
      const [k, e] = first.value;
      this.map.delete(k);
      this.bytes -= sizeOf(k, e);
      this.evictions++;
    }
    this.map.set(key, entry);
    this.bytes += size;
    return true;
  }
}

/** A cost-aware entry: its place in the heap and its priority. */
class Slot {
  constructor(
    readonly key: string,
    public entry: CacheEntry,
    public size: number,
    public hits: number,
    public priority: number,
    public index: number,
  ) {}
}

/**
 * GreedyDual-Size-Frequency over a binary min-heap of priorities:
 *
 *            [0] lowest H (evicted first)
 *          /      \
 *        [1]      [2]        children of i: 2i+1, 2i+2
 *       /  \     /  \
 */
export class CostAwareStore implements AnswerStore {
  readonly policy = 'cost-aware';
  bytes = 0;
  evictions = 0;
  /** The inflation value L: the priority of the last evicted entry. */
  private floor = 0;
  private readonly slots = new Map<string, Slot>();
  private readonly heap: Slot[] = [];

  constructor(private readonly maxBytes: number) {}

  get size(): number {
    return this.slots.size;
  }

  private priorityOf(s: Slot): number {
    return this.floor + (s.hits * Math.max(s.entry.costMs, 0.001)) / s.size;
  }

  get(key: string, nowMs: number): CacheEntry | undefined {
    const s = this.slots.get(key);
    if (s === undefined) return undefined;
    if (s.entry.expiresAt <= nowMs) {
      this.remove(s);
      return undefined;
    }
    s.hits++;
    s.priority = this.priorityOf(s);
    this.down(s.index);
    return s.entry;
  }

  set(key: string, entry: CacheEntry): boolean {
    const size = sizeOf(key, entry);
    if (size > this.maxBytes) return false;
    const old = this.slots.get(key);
    if (old !== undefined) this.remove(old);
    while (this.bytes + size > this.maxBytes && this.heap.length > 0) {
      const victim = this.heap[0]!;
      this.floor = victim.priority;
      this.remove(victim);
      this.evictions++;
    }
    const s = new Slot(key, entry, size, 1, 0, this.heap.length);
    s.priority = this.priorityOf(s);
    this.slots.set(key, s);
    this.heap.push(s);
    this.up(s.index);
    this.bytes += size;
    return true;
  }

  private remove(s: Slot): void {
    this.slots.delete(s.key);
    this.bytes -= s.size;
    const last = this.heap.pop()!;
    if (last !== s) {
      this.heap[s.index] = last;
      last.index = s.index;
      this.down(last.index);
      this.up(last.index);
    }
  }

  private swap(i: number, j: number): void {
    const h = this.heap;
    const a = h[i]!;
    const b = h[j]!;
    h[i] = b;
    h[j] = a;
    a.index = j;
    b.index = i;
  }

  private up(i: number): void {
    const h = this.heap;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]!.priority <= h[i]!.priority) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(i: number): void {
    const h = this.heap;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && h[l]!.priority < h[m]!.priority) m = l;
      if (r < h.length && h[r]!.priority < h[m]!.priority) m = r;
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }
}

/** A store of the given policy. */
export function createAnswerStore(policy: 'lru' | 'cost-aware', maxBytes: number): AnswerStore {
  return policy === 'lru' ? new LruStore(maxBytes) : new CostAwareStore(maxBytes);
}
