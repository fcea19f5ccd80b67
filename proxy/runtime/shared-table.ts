/**
 * State the threads of `server.workers` share exactly: a table of small records (four Int32 cells,
 * or two Float64s, per key) in one SharedArrayBuffer that every thread maps. With one thread the
 * table is an ordinary buffer and the same code runs. What lives here:
 *
 * - each upstream node's load: attempts in flight and their summed cost (`node` keys), updated with
 *   atomic adds, so every balancer, circuit breaker and admin view reads the load of all threads;
 * - each concurrency limit's requests in flight (`max_concurrent`, `conc` keys);
 * - each listener's open connections under `max_connections` (`conn` keys);
 * - each rate-limit bucket's level and last refill (`bucket` keys, Float64s), changed only under the
 *   table's lock (`lock`/`unlock`), so a multi-bucket take is atomic across threads.
 *
 * A key's record is found through an open-addressed directory in the same buffer. A thread that meets
 * a key first claims an entry with compare-and-swap and writes the key's two 32-bit hashes there;
 * the others find the entry by the same hashes, so threads agree on records without exchanging
 * messages. Two keys are told apart by 64 bits of hash; entries are never freed (a key that comes
 * back gets its record again, with what it held).
 */
import { fnv1a32 } from '../balance/stable-hash.js';

/** Int32 cells per record (16 bytes: two Float64s). */
const CELLS = 4;
/** Int32 words per directory entry: state, hash A, hash B, unused. */
const ENTRY = 4;
/** Int32 words of the header: the lock, then unused. */
const HEADER = 4;
/** Entry states. */
const FREE = 0;
const CLAIMING = 1;
const READY = 2;

/** Distinct keys a table holds by default (nodes, limits, buckets over a process's reloads). */
export const DEFAULT_SHARED_SLOTS = 16384;

/** One key's record: `cells[cell .. cell + 3]`, or as Float64s `floats[float]`, `floats[float + 1]`. */
export interface SharedRecord {
  readonly cells: Int32Array;
  readonly cell: number;
  readonly floats: Float64Array;
  readonly float: number;
  /** True when this call claimed the record (it is all zeros); false when it existed. */
  readonly fresh: boolean;
  /**
   * In a worker thread, its ledger (`SharedTable.ledger`): what it holds of the counts it changes,
   * at the same index as `cells`; null in the main thread.
   */
  readonly ledger: Int32Array | null;
}

export class SharedTable {
  /** The buffer to hand to other threads (`new SharedTable({ buffer })`). */
  readonly buffer: SharedArrayBuffer | ArrayBuffer;
  private readonly slots: number;
  private readonly header: Int32Array;
  private readonly dir: Int32Array;
  private readonly cells: Int32Array;
  private readonly floats: Float64Array;
  /**
   * A worker thread's ledger: one Int32 per cell of the table, the sum of what this thread added to
   * the counts it holds (requests in flight per node and their tokens, concurrency and admission
   * slots, connections), kept beside each atomic change. When the thread dies the main thread
   * takes those amounts back (`release`), so its requests do not stay counted for ever. Null in
   * the main thread (when it dies, the process does).
   */
  readonly ledger: Int32Array | null;
  /** What this thread writes in the lock word while it holds the lock: its thread index + 1. */
  private readonly lockValue: number;

  /**
   * A table of `slots` entries (a power of two) in a new buffer: shared when `shared`, for worker
   * threads; or, with `buffer`, a view of a table another thread made with the same `slots`, and
   * `ledger` that thread's ledger (`ledgerBytes`).
   */
  constructor(
    options: {
      slots?: number;
      shared?: boolean;
      buffer?: SharedArrayBuffer;
      ledger?: SharedArrayBuffer;
      /** The thread's index (0: the main thread), written in the lock word while it holds it. */
      thread?: number;
    } = {},
  ) {
    this.lockValue = (options.thread ?? 0) + 1;
    const slots = options.slots ?? DEFAULT_SHARED_SLOTS;
    if (slots <= 0 || (slots & (slots - 1)) !== 0)
      throw new Error(`shared table slots must be a power of two, not ${slots}`);
    this.slots = slots;
    const bytes = (HEADER + slots * (ENTRY + CELLS)) * 4;
    const b =
      options.buffer ?? (options.shared === true ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes));
    if (b.byteLength !== bytes) throw new Error(`shared table buffer is ${b.byteLength} bytes, not ${bytes}`);
    this.buffer = b;
    this.header = new Int32Array(b, 0, HEADER);
    this.dir = new Int32Array(b, HEADER * 4, slots * ENTRY);
    const cellsAt = (HEADER + slots * ENTRY) * 4;
    this.cells = new Int32Array(b, cellsAt, slots * CELLS);
    this.floats = new Float64Array(b, cellsAt, slots * (CELLS / 2));
    this.ledger = options.ledger === undefined ? null : new Int32Array(options.ledger);
    if (this.ledger !== null && this.ledger.length !== this.cells.length)
      throw new Error(`a ledger of ${this.ledger.length} cells for a table of ${this.cells.length}`);
  }

  /** Bytes of a ledger for a table of `slots` entries. */
  static ledgerBytes(slots: number): number {
    return slots * CELLS * 4;
  }

  /**
   * Takes back what a dead thread held (its ledger, which is then zeroed): each amount it had added
   * to a count and not given back is subtracted. Returns the number of counts corrected.
   */
  release(ledger: Int32Array): number {
    let n = 0;
    const cells = this.cells;
    for (let i = 0; i < ledger.length; i++) {
      const v = ledger[i]!;
      if (v === 0) continue;
      Atomics.sub(cells, i, v);
      ledger[i] = 0;
      n++;
    }
    return n;
  }

  /** True when the records are shared with other threads. */
  get shared(): boolean {
    return this.buffer instanceof SharedArrayBuffer;
  }

  /** Entries this table holds at most. */
  get capacity(): number {
    return this.slots;
  }

  /**
   * The record of `kind` and `key`, claimed on first use by any thread (compile time, not per
   * request). Throws when the table is full.
   */
  record(kind: string, key: string): SharedRecord {
    const full = `${kind}\n${key}`;
    const a = fnv1a32(full) | 0;
    const b = fnv1a32(`\u0000${full}`) | 0;
    const dir = this.dir;
    const mask = this.slots - 1;
    for (let i = 0; i < this.slots; i++) {
      const e = ((a >>> 0) + i) & mask;
      const at = e * ENTRY;
      let state = Atomics.load(dir, at);
      if (state === FREE) {
        if (Atomics.compareExchange(dir, at, FREE, CLAIMING) === FREE) {
          Atomics.store(dir, at + 1, a);
          Atomics.store(dir, at + 2, b);
          Atomics.store(dir, at, READY);
          return this.at(e, true);
        }
        state = Atomics.load(dir, at);
      }
      // Another thread is writing this entry's hashes: a few stores away.
      while (state === CLAIMING) state = Atomics.load(dir, at);
      if (Atomics.load(dir, at + 1) === a && Atomics.load(dir, at + 2) === b) return this.at(e, false);
    }
    throw new Error(
      `the shared state table is full (${this.slots} distinct nodes, limits and buckets since start); restart Sluice to clear it`,
    );
  }

  private at(e: number, fresh: boolean): SharedRecord {
    return {
      cells: this.cells,
      cell: e * CELLS,
      floats: this.floats,
      float: e * (CELLS / 2),
      fresh,
      ledger: this.ledger,
    };
  }

  /**
   * Takes the table's lock (for changes of several Float64s that must look atomic to other
   * threads). Spins: every holder keeps it for a few hundred nanoseconds and never awaits.
   */
  lock(): void {
    // HOT
    const h = this.header;
    const v = this.lockValue;
    while (Atomics.compareExchange(h, 0, 0, v) !== 0);
  }

  /**
   * Frees the lock if the thread `thread` held it when it died (ended between `lock` and `unlock`:
   * out of memory, say), which would otherwise leave every other thread spinning for ever.
   * Returns true when it did.
   */
  releaseLockOf(thread: number): boolean {
    return Atomics.compareExchange(this.header, 0, thread + 1, 0) === thread + 1;
  }

  unlock(): void {
    // HOT
    Atomics.store(this.header, 0, 0);
  }
}

/** The cells of a node's load: `cells[cell]` in flight, `cells[cell + 1]` in-flight cost. */
export interface NodeLoadCells {
  readonly cells: Int32Array;
  readonly cell: number;
  /** The thread's ledger (`SharedRecord.ledger`), where a worker thread keeps what it holds. */
  readonly ledger?: Int32Array | null;
}

/** Cells of its own for a node or counter that no table placed (tests, tools): shared with no one. */
export function privateCells(): NodeLoadCells {
  return { cells: new Int32Array(2), cell: 0 };
}
