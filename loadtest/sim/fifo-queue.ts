/**
 * The waiting queue in front of a node's sequence slots: first in, first out, O(1) at both ends.
 * It stores items only; which items are still wanted is the engine's concern.
 */

/**
 * An array with a moving head. Consumed slots are reclaimed in one compaction when they make up
 * more than half of the array, so memory stays proportional to the live items.
 *
 * ```
 *   items: [ x x x | a b c d ]      x = consumed, reclaimed on compaction
 *                    ^head     ^push here
 * ```
 */
export class FifoQueue<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  /** Items still queued. */
  get length(): number {
    return this.items.length - this.head;
  }

  /** Appends at the tail. */
  push(item: T): void {
    this.items.push(item);
  }

  /** The oldest item, without removing it; undefined when empty. */
  peek(): T | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined;
  }

  /** Removes and returns the oldest item; undefined when empty. */
  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** Removes every item and returns them oldest first. */
  drain(): T[] {
    const out = this.items.slice(this.head) as T[];
    this.items = [];
    this.head = 0;
    return out;
  }
}
