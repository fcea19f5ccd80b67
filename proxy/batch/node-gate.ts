/**
 * One node's fanout queue: its single-item calls in flight and the items waiting for a free slot
 * under the per-node concurrency limit. The queue is intrusive (linked through `BatchItem.nextQueued`)
 * so waiting costs no allocation:
 *
 *   head → item → item → item ← tail      running: calls in flight (≤ limit)
 */

import type { BatchItem } from './batch-item.js';
import type { BatchTransport } from './batch-transport.js';

/** Owned by the fanout dispatcher, one per node (transport). */
export class NodeGate {
  /** Single-item calls in flight on this node. */
  running = 0; // calls
  private head: BatchItem | null = null;
  private tail: BatchItem | null = null;

  constructor(
    readonly transport: BatchTransport,
    /** Maximum `running`. */
    readonly limit: number, // calls
  ) {}

  /** Appends an item. // HOT */
  push(item: BatchItem): void {
    item.nextQueued = null;
    if (this.tail === null) this.head = item;
    else this.tail.nextQueued = item;
    this.tail = item;
  }

  /** Removes the oldest item when a slot is free, else null. // HOT */
  take(): BatchItem | null {
    const item = this.head;
    if (item === null || this.running >= this.limit) return null;
    this.head = item.nextQueued;
    if (this.head === null) this.tail = null;
    item.nextQueued = null;
    this.running++;
    return item;
  }
}
