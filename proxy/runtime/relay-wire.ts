/**
 * What the main thread's relays (batch-relay.ts, endpoint-relay.ts, admission-relay.ts) have in
 * common on the wire between a worker thread and the main thread: the numbers a worker gives its
 * requests in flight, the main thread's key for one of them, and bytes as a message carries them.
 */

/** Numbers a worker gives its relayed requests (1 up to this, then 1 again: never two in flight). */
export const RELAY_IDS = 0x4000_0000;

/** The next numbers of one worker's relayed requests of one kind. */
export class RelayIds {
  private last = 0;

  next(): number {
    this.last = this.last + 1 < RELAY_IDS ? this.last + 1 : 1;
    return this.last;
  }
}

/** The main thread's key of worker `index`'s request `id` (at most 64 threads: exact in a double). */
export function relayKey(index: number, id: number): number {
  return index * RELAY_IDS + id;
}

/** The worker thread of a `relayKey`. */
export function relayWorker(key: number): number {
  return Math.floor(key / RELAY_IDS);
}

/**
 * `b` as a message may carry it: structured cloning copies a view's whole ArrayBuffer, which for a
 * slice of a pooled buffer or of a batch's whole answer is far more than its bytes.
 */
export function exact(b: Uint8Array): Uint8Array {
  return b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b : new Uint8Array(b);
}

/** The bytes a message brought, as a Buffer over the same memory (no copy). */
export function bufferOf(b: Uint8Array): Buffer {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}
