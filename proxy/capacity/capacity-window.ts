/**
 * A sliding window over one pool's cumulative capacity counters: a fixed ring of snapshots, so the
 * figures of the last `windowMs` are the newest snapshot minus the oldest. It stores and subtracts
 * counters; it never reads nodes or clocks itself.
 */

/** Cumulative counters of one pool at one instant (fixed shape; every field only grows). */
export class CapacityCounters {
  /** When the snapshot was taken, monotonic ms. */
  atMs = 0; // ms
  /** Upstream calls dispatched to the pool's nodes (every kind: plain, batch, retry, hedge, mirror). */
  calls = 0; // calls
  /** Upstream calls made by native micro-batchers. */
  nativeCalls = 0; // calls
  /** Items native micro-batchers sent (first sends; duplicates and rejected items excluded). */
  nativeItems = 0; // items
  /** Upstream calls made by fanout micro-batchers. */
  fanoutCalls = 0; // calls
  /** Items fanout micro-batchers sent (first sends). */
  fanoutItems = 0; // items
  /** Integral of the pool's calls in flight over time. */
  inFlightMs = 0; // call·ms
  /** Integral over time of the number of nodes with at least one call in flight. */
  busyNodeMs = 0; // node·ms

  /** Copies every field of `from` into this object. */
  copyFrom(from: CapacityCounters): void {
    this.atMs = from.atMs;
    this.calls = from.calls;
    this.nativeCalls = from.nativeCalls;
    this.nativeItems = from.nativeItems;
    this.fanoutCalls = from.fanoutCalls;
    this.fanoutItems = from.fanoutItems;
    this.inFlightMs = from.inFlightMs;
    this.busyNodeMs = from.busyNodeMs;
  }

  /** Sets this object to `newer − older`, field by field (`atMs` becomes the span, ms). */
  difference(newer: CapacityCounters, older: CapacityCounters): void {
    this.atMs = newer.atMs - older.atMs;
    this.calls = newer.calls - older.calls;
    this.nativeCalls = newer.nativeCalls - older.nativeCalls;
    this.nativeItems = newer.nativeItems - older.nativeItems;
    this.fanoutCalls = newer.fanoutCalls - older.fanoutCalls;
    this.fanoutItems = newer.fanoutItems - older.fanoutItems;
    this.inFlightMs = newer.inFlightMs - older.inFlightMs;
    this.busyNodeMs = newer.busyNodeMs - older.busyNodeMs;
  }
}

/** Snapshots the window keeps per `windowMs`: one is pushed every `windowMs / WINDOW_SLOTS`. */
export const WINDOW_SLOTS = 20;

/**
 * The ring: `WINDOW_SLOTS + 1` preallocated snapshots, overwritten oldest first.
 *
 * ```
 *   slots: [ s5 | s6 | s7 | ... | s25 ]       (21 slots, reused in place)
 *                ^newest  ^oldest
 *   window figures = newest − oldest  (covers windowMs once the ring is full)
 * ```
 */
export class CapacityWindow {
  /** Length of the window, ms. */
  readonly windowMs: number; // ms
  /** Time between two snapshots, ms. */
  readonly stepMs: number; // ms
  private readonly slots: CapacityCounters[];
  /** Index of the newest snapshot; -1 while empty. */
  private newest = -1;
  /** Snapshots held, ≤ slots.length. */
  private count = 0;

  constructor(windowMs: number) {
    this.windowMs = windowMs;
    this.stepMs = windowMs / WINDOW_SLOTS;
    this.slots = Array.from({ length: WINDOW_SLOTS + 1 }, () => new CapacityCounters());
  }

  /** Snapshots held (for tests and the first figures after start). */
  get size(): number {
    return this.count;
  }

  /** Stores a copy of `counters` as the newest snapshot, dropping the oldest when full. */
  push(counters: CapacityCounters): void {
    this.newest = (this.newest + 1) % this.slots.length;
    this.slots[this.newest]!.copyFrom(counters);
    if (this.count < this.slots.length) this.count++;
  }

  /**
   * Writes newest − oldest into `out` and returns true; false (and `out` untouched) while fewer
   * than two snapshots are held.
   */
  delta(out: CapacityCounters): boolean {
    if (this.count < 2) return false;
    const oldest = (this.newest - this.count + 1 + this.slots.length) % this.slots.length;
    out.difference(this.slots[this.newest]!, this.slots[oldest]!);
    return true;
  }
}
