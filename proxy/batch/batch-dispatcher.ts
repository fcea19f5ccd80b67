/**
 * What the two batching modes share: resolving an item (and its duplicates) exactly once, deciding
 * between retry and final answer, and the backoff timers of waiting retries. The modes
 * (`native-dispatcher.ts`, `fanout-dispatcher.ts`) decide how calls are made; the window logic is
 * the micro-batcher's.
 */

import type { BatchCodec } from './batch-codec.js';
import type { BatchItem } from './batch-item.js';
import type { ResolvedBatchOptions } from './batch-options.js';
import type { BatchRun } from './batch-run.js';
import type { MicroBatcherStats } from './batch-stats.js';
import { isNodePicker, type BatchNodePicker, type BatchTransport } from './batch-transport.js';
import { noNodeFailure, transportFailure } from './item-errors.js';
import { backoffMs, isRetryableStatus } from './retry-policy.js';

/** Items waiting for the same backoff timer. */
class RetryGroup {
  timer: NodeJS.Timeout | null = null;
  constructor(readonly items: BatchItem[]) {}
}

/** Context every dispatcher gets from its micro-batcher. */
export interface DispatcherContext {
  readonly options: ResolvedBatchOptions;
  readonly codec: BatchCodec;
  readonly upstream: BatchTransport | BatchNodePicker;
  readonly stats: MicroBatcherStats;
  /** Called once per resolved item (duplicates included). */
  readonly itemSettled: () => void;
}

/** A batching mode. `dispatch` is called when a window closes with the window's distinct items. */
export abstract class BatchDispatcher {
  protected closing = false;
  private readonly waiting = new Set<RetryGroup>();

  constructor(protected readonly ctx: DispatcherContext) {}

  /** Sends a closed window's items (input order); every item is resolved later, exactly once. */
  abstract dispatch(items: BatchItem[], run: BatchRun): void;

  /** Sends one item again (retry): a single-item call. */
  protected abstract resend(item: BatchItem): void;

  /**
   * Stops retrying: waiting retries resolve at once with their last failure, later failures are
   * final. Calls in flight and queued fanout items still complete. Leaves no timer behind.
   */
  close(): void {
    this.closing = true;
    for (const group of this.waiting) {
      if (group.timer !== null) clearTimeout(group.timer);
      for (const item of group.items) this.settleLast(item);
    }
    this.waiting.clear();
  }

  /** Backoff timers pending (for tests and drain). */
  get retriesWaiting(): number {
    return this.waiting.size;
  }

  /** The node for the next call. */
  protected pick(): BatchTransport | null {
    const up = this.ctx.upstream;
    return isNodePicker(up) ? up.pick() : up;
  }

  /** Ends an item's first round in its batch's latency accounting. // HOT */
  protected firstCallDone(item: BatchItem): void {
    const run = item.run;
    if (run === null) return;
    item.run = null;
    run.callDone(1);
  }

  /** A node's answer to a call that carried only `item`. // HOT */
  protected answerOne(item: BatchItem, status: number, body: Buffer): void {
    if (status >= 200 && status < 300) this.settle(item, status, body);
    else this.fail([item], status, body, isRetryableStatus(status));
  }

  /** A rejected `send` for a call that carried `items`. */
  protected transportError(items: BatchItem[], err: unknown): void {
    const f = transportFailure(err);
    this.fail(items, f.status, f.body, f.retryable);
  }

  /**
   * No node could be picked for a call that would have carried `items`: a round of `max_attempts`
   * (so a fleet with no node is not waited out here for ever), but not an upstream call.
   */
  protected noNode(items: BatchItem[]): void {
    const f = noNodeFailure(this.ctx.options.route);
    for (const item of items) {
      item.attempts++;
      item.noNodeRounds++;
    }
    this.fail(items, f.status, f.body, f.retryable);
  }

  /**
   * A failed call that carried `items`: those with attempts left wait one shared backoff timer and
   * are then sent again one by one; the others resolve with this failure.
   */
  protected fail(items: BatchItem[], status: number, body: Buffer, retryable: boolean): void {
    const o = this.ctx.options;
    let again: BatchItem[] | null = null;
    let attempts = 1;
    for (const item of items) {
      item.lastStatus = status;
      item.lastBody = body;
      if (retryable && !this.closing && item.attempts < o.maxAttempts && o.retryAllowed()) {
        (again ??= []).push(item);
        if (item.attempts > attempts) attempts = item.attempts;
      } else {
        this.settle(item, status, body);
      }
    }
    if (again === null) return;
    this.ctx.stats.retries += again.length;
    const group = new RetryGroup(again);
    this.waiting.add(group);
    group.timer = setTimeout(this.fireRetry, backoffMs(attempts, o.retryBaseMs, o.retryMaxMs), group);
  }

  /** Resolves an item and every duplicate chained to it, exactly once. // HOT */
  protected settle(item: BatchItem, status: number, body: Buffer): void {
    if (item.settled) throw new Error(`invariant broken: batch item ${item.tag} resolved twice`);
    item.settled = true;
    const stats = this.ctx.stats;
    for (let it: BatchItem | null = item; it !== null; it = it.nextDuplicate) {
      if (status < 200 || status >= 300) stats.failedItems++;
      try {
        it.sink.onBatchResult(it.tag, status, body, item.attempts - item.noNodeRounds);
      } catch {
        // A throwing sink is the caller's bug; the neighbours must still get their results.
        stats.sinkErrors++;
      }
      this.ctx.itemSettled();
    }
  }

  private settleLast(item: BatchItem): void {
    this.settle(item, item.lastStatus, item.lastBody ?? Buffer.alloc(0));
  }

  private readonly fireRetry = (group: RetryGroup): void => {
    this.waiting.delete(group);
    group.timer = null;
    for (const item of group.items) this.resend(item);
  };
}
