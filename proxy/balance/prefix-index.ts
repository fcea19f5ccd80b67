/**
 * What one node has likely kept in its prefix cache, as Sluice can know it: the prompt block hashes
 * (`prompt-blocks.ts`) of the requests this instance sent there, aged out the way a full KV cache
 * evicts, oldest first. Approximate by design and bounded: two generations of a fixed-size
 * open-addressing set, allocated once; recording and lookups never allocate.
 *
 *   current  [ . h7 . . h11 h3 . . ]   inserts and touches go here
 *   previous [ h15 . h4 . . . h3 . ]   the generation before; a lookup looks in both
 *   when current has taken its share of blocks: previous is dropped, current becomes previous
 *
 * So the set holds between 2/3 and 4/3 of `capacity` of the most recently used blocks, the node's
 * cache size on average: an LRU with eviction in batches instead of one block at a time.
 *
 * Each entry also carries a stamp: the index's clock (prompt blocks recorded so far) at its last
 * use. `ageOf` gives how many blocks were recorded since, the block's distance from the top of an
 * LRU cache; the policy compares it with the room the node's cache has now (its KV capacity less
 * what the in-flight attempts hold), which the generations, sized for an empty node, cannot know.
 *
 * Not every block is stored. A block hash covers all text before it, so a prompt is recorded by
 * its checkpoints, every CHECKPOINT_BLOCKS-th block (blocks 3, 7, 11, ...), and its last block:
 *
 *   prompt P (14 blocks)   0 1 2 [3] 4 5 6 [7] 8 9 10 [11] 12 [13]     [ ] = recorded
 *   next turn Q (20)       matched: checkpoints 3, 7, 11 held, then P's last block 13 → 14 blocks
 *
 * A prompt that extends a recorded one (the next turn of a conversation) matches exactly; one that
 * shares only part of a recorded prompt matches to the last checkpoint of that part (at most
 * CHECKPOINT_BLOCKS − 1 blocks short). Recording costs a quarter of the hash-table writes it would
 * with every block. A prompt whose last block is not a checkpoint flags the checkpoint before its
 * end (ENDS_FLAG), so that a search looks at the blocks after a checkpoint only where a recorded
 * prompt ended there. A generation ends after its share of blocks (or of entries, whichever runs out
 * first); the tables are sized for one entry per two blocks, half the memory of every block.
 *
 * Memory. The two generations' tables are one array, slot beside slot, so that a lookup that
 * misses in the current generation finds the same slots of the previous one in the cache lines it
 * has just read:
 *
 *   slots  [ hA0 sA0 hB0 sB0 | hA1 sA1 hB1 sB1 | ... ]   h = hash, s = stamp; A, B = the tables
 *   current = A or B (an offset of 0 or 2 int32s), previous = the other; a rotation swaps them
 *
 * Most lookups miss (a node holds few of the prompts asked about), and a pool's tables together
 * are too large for the processor's nearer caches. So each table has a filter: a bit array, the bit
 * at a hash's low bits set for every entry put in the table (a Bloom filter of one hash). A lookup
 * reads the table only where that bit is set, so a miss usually reads the filters alone, which are
 * small enough to stay cached (table A's filter, then table B's, in one array). The filters take
 * 1/16 of the index's bytes:
 *
 *   16 × S bytes = tables 15 × S (S − S/16 slots of 16 bytes) + filters S (4 × S bits each)
 *
 * with S the power of two at least twice a generation's entries: a table is at most about half
 * full, and a filter's bit for a hash its table lacks is set with a chance of at most 12 %. A hash
 * is placed in a table by its high bits, in a filter by its low bits.
 *
 * Dropping a generation writes nothing to its table (it could not be zeroed in one pass: its slots
 * alternate with the other's); only its filter is zeroed. Each table has a birth stamp, the clock
 * when it last became `current`; a slot whose stamp is older than its table's birth is empty, to
 * lookups, to the end of a probe sequence and to an insertion alike, so a recycled table reads
 * exactly as a zeroed one would (its entries were all stamped while it was current, before the
 * birth):
 *
 *   recycled table [ h9@40 . h2@71 h5@130 . ]   born 120: only h5 is held; h9 and h2 read as empty
 *
 * Stamps and births are compared as int32 differences, exact while they are less than 2^30 apart:
 * a table is zeroed for real when it is recycled 2^30 blocks or more after its last real clearing
 * (and when it would be born at the clock value it last held entries at, which only a recording
 * that rotates twice can cause).
 */

/**
 * Bytes of one slot: a 30-bit block hash in an int32 (0 = empty) and, beside it in the same array
 * (one cache line for both), the stamp of its last use: the index's block clock then.
 */
const SLOT_BYTES = 8;
/** Every how many blocks a prompt is recorded (see the module comment). */
export const CHECKPOINT_BLOCKS = 4;
/** Blocks of clock after a table's last real clearing past which recycling it zeroes it (see above). */
const WRAP_GUARD_BLOCKS = 1 << 30;
/** Bits of a slot's first int32 that hold the block hash (30-bit, never 0; prompt-blocks.ts). */
const HASH_BITS = 0x3fffffff;
/**
 * Set beside a checkpoint's hash: a prompt recorded in this generation ended within the
 * CHECKPOINT_BLOCKS − 1 blocks after it (its last block is held after this checkpoint).
 */
const ENDS_FLAG = 0x40000000;

export class PrefixIndex {
  /** Prompt blocks recorded into one generation before it becomes the previous one. */
  readonly generationBlocks: number;
  /** Entries one generation holds at most (it becomes the previous one sooner if they run out). */
  readonly generationEntries: number;
  /** Both tables: slot i of table A at [4i] (hash) and [4i + 1] (stamp), of table B at [4i + 2], [4i + 3]. */
  private readonly slots: Int32Array;
  /** Slots per table. */
  private readonly tableSlots: number;
  /** `tableSlots / 2^30`: a 30-bit hash times this, truncated, is its first slot. */
  private readonly scale: number;
  /** Both filters: bit b of table A's in word b >>> 5, of table B's in word `filterWords` + (b >>> 5). */
  private readonly filter: Int32Array;
  /** Words of one filter. */
  private readonly filterWords: number;
  /** Offsets in `filter` of the current and the previous generation's filters. */
  private currentFilter = 0;
  private previousFilter = 0;
  /** Bits per filter − 1 (a power of two − 1): a hash's bit is `h & filterMask`. */
  private readonly filterMask: number;
  /** Offset in `slots` of the current generation's table (0: A, 2: B) and of the previous one's. */
  private current = 0;
  private previous = 2;
  /** Clock when `current` / `previous` last became current: older stamps in it are empty slots. */
  private bornCurrent = 0;
  private bornPrevious = 0;
  /** Clock when `current` / `previous` was last zeroed for real (the wrap guard). */
  private clearedCurrent = 0;
  private clearedPrevious = 0;
  /** Clock at the last rotation. */
  private rotatedAt = 0;
  /**
   * Prompt blocks recorded since the index was made (int32, wrapping): the clock of the stamps. A
   * node's cache evicts the least recently used blocks, so a prefix whose last use is more blocks
   * ago than the cache has room for is gone, whatever the generations still say.
   */
  private clock = 0;
  /** Whether the index has rotated, and whether a rotation has dropped a generation that held entries. */
  private rotated = false;
  private dropped = false;
  /** Stamp of the entry the last successful `has` found. */
  private probeStamp = 0;
  /** Stamp of the checkpoint the last `atLeast` found held, and the blocks it answered. */
  private heldStamp = 0;
  private heldBlocks = 0;
  /** Whether a prompt shorter than CHECKPOINT_BLOCKS blocks (no checkpoint to flag) went into `current` / `previous`. */
  private shortCurrent = false;
  private shortPrevious = false;
  /** Stamp of the last block the latest `matchedBlocks` found held. */
  private matchedStamp = 0;
  /** Entries in `current`. */
  private count = 0;
  /** Prompt blocks recorded into `current` (blocks already held there are not counted again). */
  private blocks = 0;

  /**
   * An index for a node caching about `capacityBlocks` blocks (at least 16). `startClock` is the
   * block clock's first value (default 0; stamps are compared modulo 2^32, and tests start the
   * clock next to a wrap).
   */
  constructor(capacityBlocks: number, startClock = 0) {
    this.clock = startClock | 0;
    this.bornCurrent = this.clock;
    this.bornPrevious = this.clock;
    this.clearedCurrent = this.clock;
    this.clearedPrevious = this.clock;
    this.rotatedAt = this.clock;
    this.generationBlocks = Math.max(32, Math.ceil((capacityBlocks * 2) / 3));
    // A long prompt takes one entry per CHECKPOINT_BLOCKS blocks, but the next turn of a
    // conversation adds only its few new blocks and one entry for its last block: about one entry
    // per two blocks. A generation is measured in the blocks recorded into it, not in its entries,
    // so that the index forgets what the node's cache would: measured in entries at one per four
    // blocks, short turns made it forget at about half the capacity.
    this.generationEntries = Math.max(8, Math.ceil(this.generationBlocks / 2));
    // Load factor about 1/2 at most, so a probe sequence stays short (see the module comment).
    let size = 16;
    while (size < this.generationEntries * 2) size *= 2;
    this.tableSlots = size - size / 16;
    this.scale = this.tableSlots / 2 ** 30;
    this.slots = new Int32Array(this.tableSlots * 4);
    this.filterMask = 4 * size - 1;
    this.filterWords = size / 8;
    this.filter = new Int32Array(2 * this.filterWords);
    this.previousFilter = this.filterWords;
  }

  /** Bytes the index holds, fixed at construction. */
  get memoryBytes(): number {
    return (this.slots.length / 2) * SLOT_BYTES + this.filter.byteLength;
  }

  /** Entries held now (both generations; one in both counts twice), for tests and diagnostics. */
  get size(): number {
    const t = this.slots;
    let n = 0;
    for (let i = 0; i < t.length; i += 4) {
      if (live(t, i + this.current, this.bornCurrent)) n++;
      if (live(t, i + this.previous, this.bornPrevious)) n++;
    }
    return n;
  }

  /** True when block hash `h` (never 0) is held. */
  has(h: number): boolean {
    // HOT
    // Both filters first (one word each, at the same place in both; read together, not one after
    // the other): most lookups end there, in code small enough to be inlined where it is called.
    const f = this.filter;
    const b = h & this.filterMask;
    if (((f[this.currentFilter + (b >>> 5)]! | f[this.previousFilter + (b >>> 5)]!) & (1 << b)) === 0) {
      return false;
    }
    return this.inTables(h);
  }

  /** `has` past the filters: each generation's table whose filter lets `h` be there, the current one first. */
  private inTables(h: number): boolean {
    // HOT
    const f = this.filter;
    const b = h & this.filterMask;
    const bit = 1 << b;
    const t = this.slots;
    let i = -1;
    if ((f[this.currentFilter + (b >>> 5)]! & bit) !== 0) {
      i = find(t, this.tableSlots, this.scale, h, this.current, this.bornCurrent);
    }
    if (i < 0 && (f[this.previousFilter + (b >>> 5)]! & bit) !== 0) {
      i = find(t, this.tableSlots, this.scale, h, this.previous, this.bornPrevious);
    }
    if (i < 0) return false;
    this.probeStamp = t[i + 1]!;
    return true;
  }

  /**
   * Position in `slots` of block hash `h` in the table at offset `at` (born at clock `born`), or
   * -1; the table is read only when its filter lets `h` be there.
   */
  private findIn(h: number, at: number, born: number): number {
    // HOT
    const b = h & this.filterMask;
    if ((this.filter[(at >> 1) * this.filterWords + (b >>> 5)]! & (1 << b)) === 0) return -1;
    return find(this.slots, this.tableSlots, this.scale, h, at, born);
  }

  /**
   * A lower bound of the age, in blocks, of anything the index has forgotten: 0 while it has
   * dropped nothing (a block it does not hold was never recorded), else the blocks recorded into
   * the previous and the current generation since the last drop.
   */
  get forgottenAge(): number {
    // HOT
    return this.dropped ? this.generationBlocks + this.blocks : 0;
  }

  /**
   * `ageOf` the last block that the latest `matchedBlocks` found held (when it returned more than
   * 0), without another lookup.
   */
  get matchedAge(): number {
    // HOT
    return (this.clock - this.matchedStamp) | 0;
  }

  /**
   * Prompt blocks recorded into the index since block hash `h` was last used (recorded, or the
   * last block matched of a prompt recorded after it), or -1 when it is not held: the block's
   * distance from the top of the node's LRU cache, in blocks.
   */
  ageOf(h: number): number {
    // HOT
    return this.has(h) ? (this.clock - this.probeStamp) | 0 : -1;
  }

  /**
   * What one lookup says about whether the node holds at least `count` leading blocks of `hashes`:
   * -1 when it surely holds fewer (the checkpoint below `count` is missing), else a number of
   * leading blocks it surely holds (0 when there is no checkpoint to look at), to pass to
   * `matchedBlocks` as `held`.
   */
  atLeast(hashes: Int32Array, count: number): number {
    // HOT
    const c = count < hashes.length ? count : hashes.length;
    // The last checkpoint at or below block c − 1: held whenever c blocks are.
    const k = c - (c % CHECKPOINT_BLOCKS);
    if (k === 0) return 0;
    if (!this.has(hashes[k - 1]!)) return -1;
    this.heldStamp = this.probeStamp;
    this.heldBlocks = k;
    return k;
  }

  /**
   * How many leading blocks of `hashes` are held. The blocks of one prompt are recorded and aged
   * together, so a held checkpoint means held blocks before it: a binary search for the last held
   * checkpoint, then, when the checkpoint is flagged (a recorded prompt ended within the next few
   * blocks), a look at those blocks; O(log n) lookups. `held`, when given, is a count of leading
   * blocks the caller already found held (`atLeast`); the search starts there.
   */
  matchedBlocks(hashes: Int32Array, held = 0): number {
    // HOT
    const n = hashes.length;
    if (n === 0) return 0;
    if (this.has(hashes[n - 1]!)) {
      this.matchedStamp = this.probeStamp;
      return n;
    }
    // Checkpoint j is block j × CHECKPOINT_BLOCKS + CHECKPOINT_BLOCKS − 1; search j in [lo, hi).
    let lo = held >= CHECKPOINT_BLOCKS ? ((held / CHECKPOINT_BLOCKS) | 0) - 1 : -1; // held (or none)
    let hi = ((n - 1) / CHECKPOINT_BLOCKS) | 0; // not held (or past the prompt)
    // The stamp of checkpoint lo: from `atLeast` when it gave `held` (checked below if not found again).
    let loStamp = this.heldStamp;
    let loProbed = lo < 0;
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (this.has(hashes[mid * CHECKPOINT_BLOCKS + CHECKPOINT_BLOCKS - 1]!)) {
        lo = mid;
        loStamp = this.probeStamp;
        loProbed = true;
      } else hi = mid;
    }
    const base = (lo + 1) * CHECKPOINT_BLOCKS; // blocks held through the last held checkpoint (< n)
    // A recorded prompt that this one extends may have ended within the next few blocks: its last
    // block. Only where one did (`endsAfter`).
    if (lo < 0 ? this.shortCurrent || this.shortPrevious : this.endsAfter(hashes[base - 1]!)) {
      let top = base + CHECKPOINT_BLOCKS - 1;
      if (top > n - 1) top = n - 1;
      for (let i = top - 1; i >= base; i--) {
        if (this.has(hashes[i]!)) {
          this.matchedStamp = this.probeStamp;
          return i + 1;
        }
      }
    }
    // A `held` that is not what the last `atLeast` answered: the stamp is looked up once.
    if (!loProbed && held !== this.heldBlocks) {
      this.has(hashes[base - 1]!);
      loStamp = this.probeStamp;
    }
    this.matchedStamp = loStamp;
    return base;
  }

  /**
   * True when a prompt recorded in a generation that holds checkpoint `h` ended within the few
   * blocks after it: its ENDS_FLAG in `current`, or in `previous` (the copy in `current` may be
   * newer than the flagged one). A second look at an entry the search just found.
   */
  private endsAfter(h: number): boolean {
    // HOT
    const t = this.slots;
    const i = this.findIn(h, this.current, this.bornCurrent);
    if (i >= 0 && (t[i]! & ENDS_FLAG) !== 0) return true;
    if (i >= 0 && !this.rotated) return false;
    const j = this.findIn(h, this.previous, this.bornPrevious);
    return j >= 0 && (t[j]! & ENDS_FLAG) !== 0;
  }

  /**
   * Records that the node now holds every block of `hashes` (a request sent there), as the newest
   * use: its checkpoints and its last block. `matched` is what `matchedBlocks` found: when the last
   * of those is already in the current generation, so are the ones before it (a prompt's entries
   * are recorded together), and only the entries after them need touching.
   */
  record(hashes: Int32Array, matched = 0): void {
    // HOT
    const n = hashes.length;
    if (n === 0) return;
    let from = 0;
    const t = this.slots;
    const at =
      matched > 0 && matched <= n ? this.findIn(hashes[matched - 1]!, this.current, this.bornCurrent) : -1;
    if (at >= 0) from = matched;
    // The clock advances by the blocks new to the index, and every entry this prompt touches is
    // stamped with it, the matched prefix's last block too: a cache's use refreshes what it reads.
    this.clock = (this.clock + n - from) | 0;
    if (at >= 0) t[at + 1] = this.clock;
    for (
      let i = from + ((CHECKPOINT_BLOCKS - 1 - from) & (CHECKPOINT_BLOCKS - 1));
      i < n - 1;
      i += CHECKPOINT_BLOCKS
    ) {
      this.touch(hashes[i]!);
    }
    if (from < n) this.touch(hashes[n - 1]!);
    // A last block that is not a checkpoint flags the checkpoint before it (in the generation that
    // now holds it: `previous` if this recording rotated in between).
    const tail = (n - 1) % CHECKPOINT_BLOCKS;
    if (tail !== CHECKPOINT_BLOCKS - 1) {
      if (n - 1 < CHECKPOINT_BLOCKS) this.shortCurrent = true;
      else {
        const h = hashes[n - 2 - tail]!;
        let i = this.findIn(h, this.current, this.bornCurrent);
        if (i < 0) i = this.findIn(h, this.previous, this.bornPrevious);
        if (i >= 0) t[i] = t[i]! | ENDS_FLAG;
      }
    }
    this.blocks += n - from;
    if (this.blocks >= this.generationBlocks) this.rotate();
  }

  /** Forgets everything (the node restarted or its cache was dropped). */
  clear(): void {
    this.slots.fill(0);
    this.filter.fill(0);
    this.clearedCurrent = this.clock;
    this.clearedPrevious = this.clock;
    this.rotated = false;
    this.dropped = false;
    this.shortCurrent = false;
    this.shortPrevious = false;
    this.count = 0;
    this.blocks = 0;
  }

  private touch(h: number): void {
    // HOT
    const t = this.slots;
    const size = this.tableSlots;
    const at = this.current;
    const born = this.bornCurrent;
    let i = ((h & HASH_BITS) * this.scale) | 0;
    for (;;) {
      const k = 4 * i + at;
      const v = t[k]!;
      if (v === 0 || ((t[k + 1]! - born) | 0) < 0) break;
      if ((v & HASH_BITS) === h) {
        t[k + 1] = this.clock;
        return;
      }
      i = i + 1 === size ? 0 : i + 1;
    }
    t[4 * i + at] = h;
    t[4 * i + at + 1] = this.clock;
    const b = h & this.filterMask;
    const w = (at >> 1) * this.filterWords + (b >>> 5);
    this.filter[w] = this.filter[w]! | (1 << b);
    if (++this.count >= this.generationEntries) this.rotate();
  }

  /**
   * The oldest generation is evicted; the full one becomes the previous. The evicted table is
   * recycled as the current one by its birth stamp (see the module comment), not zeroed.
   */
  private rotate(): void {
    const old = this.previous;
    const t = this.slots;
    const clock = this.clock;
    // The first rotation drops an empty generation; every later one forgets what it held.
    if (this.rotated) this.dropped = true;
    this.rotated = true;
    let cleared = this.clearedPrevious;
    // Its entries were stamped at most at the last rotation: a birth at that same clock (two
    // rotations in one recording) would not tell them from new ones; nor would one 2^30 blocks on.
    if (clock === this.rotatedAt || (clock - cleared) >>> 0 >= WRAP_GUARD_BLOCKS) {
      for (let i = old; i < t.length; i += 4) t[i] = 0;
      cleared = clock;
    }
    const words = this.filterWords;
    this.filter.fill(0, (old >> 1) * words, ((old >> 1) + 1) * words);
    this.rotatedAt = clock;
    this.clearedPrevious = this.clearedCurrent;
    this.clearedCurrent = cleared;
    this.bornPrevious = this.bornCurrent;
    this.bornCurrent = clock;
    this.previous = this.current;
    this.current = old;
    this.previousFilter = this.currentFilter;
    this.currentFilter = (old >> 1) * words;
    this.shortPrevious = this.shortCurrent;
    this.shortCurrent = false;
    this.count = 0;
    this.blocks = 0;
  }
}

/**
 * Position in `t` (tables of `size` slots, `scale` = size / 2^30) of block hash `h` (its stamp is
 * at the next one) in the table at offset `at` (born at clock `born`), or -1. A slot is empty when
 * its hash is 0 or its stamp is older than `born`.
 */
function find(t: Int32Array, size: number, scale: number, h: number, at: number, born: number): number {
  // HOT
  let i = ((h & HASH_BITS) * scale) | 0;
  for (;;) {
    const k = 4 * i + at;
    const v = t[k]!;
    if (v === 0 || ((t[k + 1]! - born) | 0) < 0) return -1;
    if ((v & HASH_BITS) === h) return k;
    i = i + 1 === size ? 0 : i + 1;
  }
}

/** True when position `i` of `t` (a hash, its table born at clock `born`) holds an entry. */
function live(t: Int32Array, i: number, born: number): boolean {
  return t[i] !== 0 && ((t[i + 1]! - born) | 0) >= 0;
}
