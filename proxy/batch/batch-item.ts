/**
 * One item waiting for its result: the per-request object the micro-batcher queues, links into
 * windows, de-duplication chains and node queues without allocating anything else per item. It
 * owns its own bookkeeping only; deciding what happens to it is the dispatchers' job.
 */

import type { BatchRun } from './batch-run.js';

/**
 * Receives an item's result. Implemented by the per-request object of the caller (a session, a
 * batch-endpoint job), so the hot path needs no closure per item. Called exactly once per
 * submitted item, possibly synchronously from `submit` (rejections, closed batcher). Must not throw.
 */
export interface BatchItemSink {
  /**
   * `tag`: the value given to `submit` (e.g. the item's position in a multi-item request);
   * `status`/`body`: the HTTP status and body for this item alone (an OpenAI-shaped error body when
   * it failed); `attempts`: upstream calls made for it (0 when it never reached a node).
   */
  onBatchResult(tag: number, status: number, body: Buffer, attempts: number): void;
  /**
   * Optional: the item left its window. `submittedMs`/`sentMs`: when it was queued and when its
   * batch was sent (monotonic ms); `size`: items in that batch. Called before the result, at most once.
   */
  onBatchWindow?(submittedMs: number, sentMs: number, size: number): void;
  /**
   * Optional: with `server.workers`, the main thread had no batcher for the item (a reload removed
   * the batching there first; runtime/batch-relay.ts) and the caller is to send it alone. A sink
   * without it gets the closed batcher's 503 instead. Called instead of the result.
   */
  onBatchDeclined?(tag: number): void;
}

/** An item inside the batcher. Fixed shape: every field is declared here. */
export class BatchItem {
  /** Rounds this item took: upstream calls that carried it, and picks that found no node. */
  attempts = 0;
  /** Of `attempts`, the picks that found no node (no node saw the item then). */
  noNodeRounds = 0;
  /** Later identical items of the same window; they get this item's result. */
  nextDuplicate: BatchItem | null = null;
  /** Next item in a node's fanout queue (intrusive list). */
  nextQueued: BatchItem | null = null;
  /** The micro-batch whose first round this item still belongs to, null after its first call. */
  run: BatchRun | null = null;
  /** Status of the last failed call, kept for when retries stop (close). */
  lastStatus = 0;
  /** Body of the last failed call. */
  lastBody: Buffer | null = null;
  /** Set once the result went to the sink(s). */
  settled = false;
  /** When `submit` queued the item, monotonic ms. */
  submittedMs = 0;

  constructor(
    /** The parsed request body of this item. */
    readonly body: object,
    /** The body's bytes as the caller received them, or null when it has only the parsed body. */
    readonly raw: Buffer | null,
    /** De-duplication key, null when the item is never shared. */
    readonly key: string | null,
    readonly sink: BatchItemSink,
    readonly tag: number,
  ) {}
}
