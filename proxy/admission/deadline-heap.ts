/**
 * A binary min-heap of queued entries ordered by the time they expire, so the admission controller
 * keeps one timer (for the earliest) however many requests wait. Entries record their own index,
 * which makes removing one from the middle (dispatch, cancel, eviction) O(log n).
 */
import type { QueueEntry } from './fair-queue.js';

export class DeadlineHeap {
  private readonly items: QueueEntry[] = [];

  get size(): number {
    return this.items.length;
  }

  /** The entry that expires first, or null. */
  peek(): QueueEntry | null {
    return this.items[0] ?? null;
  }

  push(e: QueueEntry): void {
    // HOT
    e.heapIndex = this.items.length;
    this.items.push(e);
    this.up(e.heapIndex);
  }

  /** Removes `e` if it is in the heap. */
  remove(e: QueueEntry): void {
    // HOT
    const i = e.heapIndex;
    if (i < 0) return;
    const items = this.items;
    const last = items.pop()!;
    e.heapIndex = -1;
    if (last === e) return;
    items[i] = last;
    last.heapIndex = i;
    this.down(i);
    this.up(last.heapIndex);
  }

  private up(i: number): void {
    const items = this.items;
    const e = items[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = items[p]!;
      if (parent.expiresMs <= e.expiresMs) break;
      items[i] = parent;
      parent.heapIndex = i;
      i = p;
    }
    items[i] = e;
    e.heapIndex = i;
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const e = items[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && items[r]!.expiresMs < items[l]!.expiresMs ? r : l;
      const child = items[c]!;
      if (child.expiresMs >= e.expiresMs) break;
      items[i] = child;
      child.heapIndex = i;
      i = c;
    }
    items[i] = e;
    e.heapIndex = i;
  }
}
