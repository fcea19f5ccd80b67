/**
 * Version affinity: remembers which pool of a split each session started on, so a session stays on
 * its version while weights change. It outlives reloads. Sessions it has forgotten fall back to a
 * stable hash of the session key, which gives the same pool as long as the weights are unchanged,
 * on every Sluice instance.
 *
 * A session is remembered by a 32-bit hash, never by its id: the id is whatever the client put in
 * the header (up to the header size limit), so a table of ids would hold as many bytes as clients
 * chose to send. Two sessions whose ids share a hash share an entry, and so a pool; they are sent
 * to the same pool by the weights anyway (the weights read the same hash), so this only matters
 * after a weight change, and stays a canary choice either way.
 *
 * The entries of every route live in one `StickyStore`: a fixed array of 12-byte entries (the
 * route-and-session key, the pool's tag, the last use), eight to a set, in one buffer. With
 * `server.workers` the buffer is a SharedArrayBuffer every thread maps, so a session remembered by
 * one thread is found by the others. Reads and writes are atomic per word; a writer claims an entry
 * by swapping its key for CLAIMED (compare-and-swap: one writer per entry at a time), writes the
 * tag, and writes the key last, and a reader checks the key again after reading the tag, so a
 * reader never takes one session's pool for another's. Two threads placing the same new session at
 * once may both store it (the same pool: the weights read the same hash); a set that is full
 * forgets its least recently used entry.
 */
import { mix32, stableHash32 } from '../balance/stable-hash.js';

/** Entries per set. */
const WAYS = 8;
/** Int32 words per entry: key, tag, last use. */
const WORDS = 3;
/** Int32 words before the sets: the use counter, then unused. */
const HEADER = 4;
/** The key of an entry a writer holds (never a session's key: `StickyTable` maps it to 1). */
const CLAIMED = -1;

/**
 * Sets of the process's store: 32,768 × 8 = 262,144 sessions over all routes, 3 MiB (memory is
 * taken by the pages entries are written to, not at start). 100,000 sessions of random hashes fill
 * it to 38 %, where about two in a thousand fall in a set already full (99,788 and 99,807 kept in
 * two tries).
 */
export const STICKY_SETS = 32768;

/** A pool's tag in the store: a nonzero 32-bit hash of its name (0 means "no entry"). */
export function poolTag(name: string): number {
  return stableHash32(name) | 0 || 1;
}

/** The entries of every route's sessions (see the module comment). */
export class StickyStore {
  /** The buffer to hand to worker threads (`new StickyStore({ buffer })`). */
  readonly buffer: SharedArrayBuffer | ArrayBuffer;
  private readonly words: Int32Array;
  private readonly mask: number;

  /**
   * A store of `sets` sets (a power of two): in a SharedArrayBuffer when `shared`, or a view of
   * `buffer`, another thread's store of the same size.
   */
  constructor(options: { sets?: number; shared?: boolean; buffer?: SharedArrayBuffer | ArrayBuffer } = {}) {
    const sets = options.sets ?? STICKY_SETS;
    if (sets <= 0 || (sets & (sets - 1)) !== 0)
      throw new Error(`sticky store sets must be a power of two, not ${sets}`);
    const bytes = StickyStore.bytes(sets);
    const b =
      options.buffer ?? (options.shared === true ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes));
    if (b.byteLength !== bytes) throw new Error(`sticky store buffer is ${b.byteLength} bytes, not ${bytes}`);
    this.buffer = b;
    this.words = new Int32Array(b);
    this.mask = sets - 1;
  }

  /** Bytes of a store of `sets` sets. */
  static bytes(sets: number): number {
    return (HEADER + sets * WAYS * WORDS) * 4;
  }

  /** Sessions the store holds at most. */
  get capacity(): number {
    return (this.mask + 1) * WAYS;
  }

  /** The tag stored for `key` (neither 0 nor CLAIMED), or 0; a hit counts as a use. */
  get(key: number): number {
    // HOT
    const w = this.words;
    const base = HEADER + (key & this.mask) * WAYS * WORDS;
    for (let i = 0; i < WAYS; i++) {
      const at = base + i * WORDS;
      if (Atomics.load(w, at) !== key) continue;
      const tag = Atomics.load(w, at + 1);
      // The entry may have been replaced between the two reads: take the tag only if it was not.
      if (Atomics.load(w, at) !== key) return 0;
      // The use counter as it stands: a hit ranks with the newest write, without writing the
      // counter's cache line, which every thread's writes share.
      Atomics.store(w, at + 2, Atomics.load(w, 0));
      return tag;
    }
    return 0;
  }

  /**
   * Stores `tag` for `key`, in its entry or in place of its set's least recently used one. The
   * entry is claimed with compare-and-swap, so two threads never write one entry at once (one
   * would leave the other's key with its own tag); the loser picks again. While an entry of the set
   * is being written (it may be this key's) the set is looked at again; after 16 looks the key is
   * not stored (the weights place the session).
   */
  set(key: number, tag: number): void {
    const w = this.words;
    const base = HEADER + (key & this.mask) * WAYS * WORDS;
    const now = Atomics.add(w, 0, 1);
    for (let round = 0; round < 2 * WAYS; round++) {
      let victim = -1;
      let seen = 0;
      let oldest = -1;
      let claimed = false;
      let found = false;
      for (let i = 0; i < WAYS; i++) {
        const at = base + i * WORDS;
        const k = Atomics.load(w, at);
        if (k === key) {
          victim = at;
          seen = k;
          found = true;
          break;
        }
        if (k === CLAIMED) {
          claimed = true;
          continue;
        }
        // Ages count from the use counter, which may wrap: the difference is right below 2^31.
        const age = k === 0 ? 0x7fff_ffff : (now - Atomics.load(w, at + 2)) | 0;
        if (age > oldest) {
          oldest = age;
          victim = at;
          seen = k;
        }
      }
      // An entry being written may be this key's (another thread storing the same session): look
      // again once it is written rather than store the key twice in the set.
      if (!found && claimed) continue;
      if (victim < 0) return;
      if (Atomics.compareExchange(w, victim, seen, CLAIMED) !== seen) continue;
      Atomics.store(w, victim + 1, tag);
      Atomics.store(w, victim + 2, now);
      Atomics.store(w, victim, key);
      return;
    }
  }

  /** Entries in use (a scan of the whole store: for tests and views, not per request). */
  get size(): number {
    const w = this.words;
    let n = 0;
    for (let at = HEADER; at < w.length; at += WORDS) if (Atomics.load(w, at) !== 0) n++;
    return n;
  }
}

/** One route's sessions in the process's store. */
export class StickyTable {
  private readonly store: StickyStore;
  /** Mixed into each session's hash, so that routes' sessions have keys of their own. */
  private readonly salt: number;

  constructor(store: StickyStore, route: string) {
    this.store = store;
    this.salt = stableHash32(`sticky\n${route}`) | 0;
  }

  private key(hash: number): number {
    // Every bit of the hash moves both the set (low bits) and the key.
    const k = mix32(hash ^ this.salt) | 0;
    return k === 0 || k === CLAIMED ? 1 : k;
  }

  /** The tag of the pool the session of hash `hash` started on, or 0. Refreshes its recency. */
  get(hash: number): number {
    // HOT
    return this.store.get(this.key(hash));
  }

  /** Remembers that the session of hash `hash` is on the pool of tag `tag` (`poolTag`). */
  set(hash: number, tag: number): void {
    this.store.set(this.key(hash), tag);
  }
}
