/**
 * One open coalescing window: the distinct items gathered so far for one group, the index of their
 * de-duplication keys, and the deadline timer. It holds state only; when to open and close it is
 * the micro-batcher's decision.
 */

import type { BatchItem } from './batch-item.js';

/** Created when the first item of a group arrives while the pool is busy. */
export class BatchWindow {
  /** Distinct items in arrival order (duplicates hang off their first copy). */
  readonly items: BatchItem[] = [];
  /** Deadline timer, null once fired or cleared. */
  timer: NodeJS.Timeout | null = null;
  /** De-duplication index, null when de-duplication is off. */
  private readonly keys: Map<string, BatchItem> | null;

  constructor(
    /** The codec group key shared by every item here. */
    readonly group: string,
    /** When the first item arrived (monotonic ms). */
    readonly openedAtMs: number, // ms
    dedup: boolean,
  ) {
    this.keys = dedup ? new Map() : null;
  }

  /** The first item with `key` in this window, or null. // HOT */
  find(key: string | null): BatchItem | null {
    if (key === null || this.keys === null) return null;
    return this.keys.get(key) ?? null;
  }

  /** Adds a distinct item. // HOT */
  add(item: BatchItem): void {
    this.items.push(item);
    if (item.key !== null && this.keys !== null) this.keys.set(item.key, item);
  }
}
