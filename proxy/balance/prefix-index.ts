/**
 * What one node has likely kept in its prefix cache, as Sluice can know it: the prompt block hashes
 * (`prompt-blocks.ts`) of the requests this instance sent there, aged out the way a full KV cache
 * evicts, oldest first. Approximate by design and bounded: two generations of a fixed-size
 * open-addressing set, allocated once; recording and lookups never allocate.
 *
 *   current  [ . h7 . . h9 h2 . . ]   inserts and touches go here
 *   previous [ h1 . h4 . . . h3 . ]   the generation before; a lookup looks in both
 *   when current holds `2/3 × capacity` blocks: previous is dropped, current becomes previous
 *
 * So the set holds between 2/3 and 4/3 of `capacity` of the most recently used blocks, the node's
 * cache size on average: an LRU with eviction in batches instead of one block at a time.
 */

/** Bytes of one slot (a 32-bit block hash; 0 = empty). */
const SLOT_BYTES = 4;

export class PrefixIndex {
  /** Blocks one generation holds before it becomes the previous one. */
  readonly generationBlocks: number;
  private current: Uint32Array;
  private previous: Uint32Array;
  private readonly mask: number;
  /** Blocks in `current`. */
  private count = 0;

  /** An index for a node caching about `capacityBlocks` blocks (at least 16). */
  constructor(capacityBlocks: number) {
    this.generationBlocks = Math.max(8, Math.ceil((capacityBlocks * 2) / 3));
    // Load factor at most 1/2, so a probe sequence stays short.
    let size = 16;
    while (size < this.generationBlocks * 2) size *= 2;
    this.mask = size - 1;
    this.current = new Uint32Array(size);
    this.previous = new Uint32Array(size);
  }

  /** Bytes the index holds, fixed at construction. */
  get memoryBytes(): number {
    return (this.current.length + this.previous.length) * SLOT_BYTES;
  }

  /** Blocks held now (both generations; a block in both counts twice), for tests and diagnostics. */
  get size(): number {
    let n = 0;
    for (const t of [this.current, this.previous]) for (let i = 0; i < t.length; i++) if (t[i] !== 0) n++;
    return n;
  }

  /** True when block hash `h` (never 0) is held. */
  has(h: number): boolean {
    // HOT
    return find(this.current, this.mask, h) || find(this.previous, this.mask, h);
  }

  /**
   * How many leading blocks of `hashes` are held. Blocks of one prompt are recorded and aged
   * together, so holding block k means holding the blocks before it: a binary search for the last
   * held one, O(log n) lookups.
   */
  matchedBlocks(hashes: Uint32Array): number {
    // HOT
    const n = hashes.length;
    if (n === 0 || !this.has(hashes[0]!)) return 0;
    if (this.has(hashes[n - 1]!)) return n;
    let lo = 0; // held
    let hi = n - 1; // not held
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (this.has(hashes[mid]!)) lo = mid;
      else hi = mid;
    }
    return lo + 1;
  }

  /**
   * Records that the node now holds every block of `hashes` (a request sent there), as the newest
   * use. `matched` is what `matchedBlocks` found: when the last of those is already in the current
   * generation, so are the ones before it (a prompt's blocks are recorded together), and only the
   * blocks after them need touching.
   */
  record(hashes: Uint32Array, matched = 0): void {
    // HOT
    let from = 0;
    if (matched > 0 && matched <= hashes.length && find(this.current, this.mask, hashes[matched - 1]!)) {
      from = matched;
    }
    for (let i = from; i < hashes.length; i++) this.touch(hashes[i]!);
  }

  /** Forgets everything (the node restarted or its cache was dropped). */
  clear(): void {
    this.current.fill(0);
    this.previous.fill(0);
    this.count = 0;
  }

  private touch(h: number): void {
    // HOT
    const t = this.current;
    const mask = this.mask;
    let i = h & mask;
    for (;;) {
      const v = t[i]!;
      if (v === h) return;
      if (v === 0) break;
      i = (i + 1) & mask;
    }
    t[i] = h;
    if (++this.count >= this.generationBlocks) {
      // The oldest generation is evicted; the full one becomes the previous.
      const old = this.previous;
      old.fill(0);
      this.previous = t;
      this.current = old;
      this.count = 0;
    }
  }
}

function find(t: Uint32Array, mask: number, h: number): boolean {
  // HOT
  let i = h & mask;
  for (;;) {
    const v = t[i]!;
    if (v === h) return true;
    if (v === 0) return false;
    i = (i + 1) & mask;
  }
}
