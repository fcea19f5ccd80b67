/**
 * Concurrent-request limits: a counter of requests in flight per tenant (or tenant × model),
 * acquired when a request is admitted and released when it finishes. Counters live in this process
 * (with the Redis store too: each instance enforces its own `max_concurrent`), in a cell of the
 * shared table that every worker thread updates atomically (runtime/shared-table.ts), and survive
 * reloads, so a reload never forgets the requests still running.
 */
import { privateCells, type NodeLoadCells } from '../runtime/shared-table.js';

/** One in-flight counter with its ceiling. */
export class ConcurrencyLimit {
  /** Counter key (tenant, or tenant and model). */
  readonly key: string;
  /** Ceiling, requests; updated by a reload. */
  limit: number;
  private readonly cells: Int32Array;
  private readonly cell: number;
  /** True when the count is shared with other threads (compare-and-swap); plain arithmetic otherwise. */
  private readonly atomic: boolean;
  /** A worker thread's ledger of the slots it holds (shared-table.ts), else null. */
  private readonly ledger: Int32Array | null;

  /** `cells`: where the count lives (a shared table's record with worker threads). */
  constructor(key: string, limit: number, cells: NodeLoadCells = privateCells()) {
    this.key = key;
    this.limit = limit;
    this.cells = cells.cells;
    this.cell = cells.cell;
    this.atomic = cells.cells.buffer instanceof SharedArrayBuffer;
    this.ledger = cells.ledger ?? null;
  }

  /** Requests holding a slot now, in every thread. */
  get inFlight(): number {
    return Atomics.load(this.cells, this.cell);
  }

  /** Takes a slot and returns true, or returns false (and takes nothing) when all are held. */
  tryAcquire(): boolean {
    // HOT
    const c = this.cells;
    const at = this.cell;
    if (!this.atomic) {
      if (c[at]! >= this.limit) return false;
      c[at]!++;
      return true;
    }
    for (;;) {
      const n = Atomics.load(c, at);
      if (n >= this.limit) return false;
      if (Atomics.compareExchange(c, at, n, n + 1) === n) {
        if (this.ledger !== null) this.ledger[at]!++;
        return true;
      }
    }
  }

  /** Gives a slot back. Releasing more than was acquired is a caller bug and is ignored. */
  release(): void {
    // HOT
    const c = this.cells;
    const at = this.cell;
    if (!this.atomic) {
      if (c[at]! > 0) c[at]!--;
      return;
    }
    for (;;) {
      const n = Atomics.load(c, at);
      if (n <= 0) return;
      if (Atomics.compareExchange(c, at, n, n - 1) === n) {
        if (this.ledger !== null) this.ledger[at]!--;
        return;
      }
    }
  }
}

/**
 * Acquires every limit in `limits` or none of them. Returns -1 on success, else the index of the
 * limit that refused (the ones before it are released again).
 */
export function acquireAll(limits: readonly ConcurrencyLimit[]): number {
  // HOT
  for (let i = 0; i < limits.length; i++) {
    if (!limits[i]!.tryAcquire()) {
      for (let j = 0; j < i; j++) limits[j]!.release();
      return i;
    }
  }
  return -1;
}

/** Releases every limit in `limits` (after a successful `acquireAll`). */
export function releaseAll(limits: readonly ConcurrencyLimit[]): void {
  // HOT
  for (let i = 0; i < limits.length; i++) limits[i]!.release();
}
