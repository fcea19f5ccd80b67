/**
 * A route's micro-batcher: gathers items into a coalescing window per codec group that closes at
 * the size limit or the deadline, whichever first, passes items straight through when the pool is
 * idle, shares identical items' results, and hands closed windows to the mode's dispatcher. It owns
 * windows and timers; it never opens connections (the transport is injected).
 */

import { nowMs } from '../lifecycle/clock.js';
import type { BatchCodec } from './batch-codec.js';
import { BatchItem, type BatchItemSink } from './batch-item.js';
import {
  BatchMode,
  resolveBatchOptions,
  type MicroBatchOptions,
  type ResolvedBatchOptions,
} from './batch-options.js';
import type { BatchDispatcher, DispatcherContext } from './batch-dispatcher.js';
import { BatchRun } from './batch-run.js';
import { MicroBatcherStats } from './batch-stats.js';
import { BatchWindow } from './batch-window.js';
import { FanoutDispatcher } from './fanout-dispatcher.js';
import { CLOSED_BODY, CLOSED_STATUS, FULL_BODY, FULL_STATUS } from './item-errors.js';
import { LatencyController } from './latency-controller.js';
import { NativeDispatcher } from './native-dispatcher.js';
import { ResultCollector, type BatchResult } from './result-collector.js';
import type { RelayTarget } from '../runtime/batch-relay.js';

/** One route's micro-batcher. Create with `createMicroBatcher`. */
export class MicroBatcher {
  /**
   * The caller's view of the pool: true while it has idle capacity (items are then sent at once).
   * Read on every item unless the `idle` option is given. Default false.
   */
  poolIdle = false;
  readonly options: ResolvedBatchOptions;
  readonly stats = new MicroBatcherStats();
  /** Current window length and size limit (see `latency-controller.ts`). */
  readonly controller: LatencyController;
  /** The mode's dispatcher. */
  readonly dispatcher: BatchDispatcher;
  private readonly codec: BatchCodec;
  private readonly idleFn: (() => boolean) | null;
  private readonly windows = new Map<string, BatchWindow>();
  /** Items accepted and not yet resolved (duplicates included). */
  private unresolved = 0; // items
  private isClosed = false;
  /**
   * In a worker thread of `server.workers`: the main thread's batcher of the same route and pool,
   * which batches this one's items (runtime/batch-relay.ts); null: this batcher batches them.
   */
  relay: RelayTarget | null = null;
  private closing: Promise<void> | null = null;
  private drained: (() => void) | null = null;

  constructor(opts: MicroBatchOptions) {
    this.options = resolveBatchOptions(opts);
    const o = this.options;
    this.codec = opts.codec;
    this.idleFn = opts.idle ?? null;
    this.controller = new LatencyController(o.maxBatchSize, o.maxWaitMs, o.targetLatencyMs, o.preferredSizes);
    const ctx: DispatcherContext = {
      options: o,
      codec: opts.codec,
      upstream: opts.upstream,
      stats: this.stats,
      itemSettled: this.itemSettled,
    };
    this.dispatcher = o.mode === BatchMode.native ? new NativeDispatcher(ctx) : new FanoutDispatcher(ctx);
  }

  /** Whether `body` may go into a batch (the codec's `combinable`); false: forward it alone. // HOT */
  accepts(body: object): boolean {
    const codec = this.codec;
    return codec.combinable === undefined || codec.combinable(body);
  }

  /** Items accepted and not yet resolved. */
  get pending(): number {
    return this.unresolved;
  }

  /** True once `close` was called: items get 503 at once. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Windows currently open. */
  get openWindows(): number {
    return this.windows.size;
  }

  /**
   * Queues one item. Its result goes to `sink.onBatchResult(tag, …)` exactly once: later, or at once
   * (503) when the batcher is closed or already holds `maxQueuedItems` items. `raw`: the body's
   * bytes as the caller received them, when it has them (fanout sends them as they are instead of
   * serialising `body` again). // HOT
   */
  submit(body: object, sink: BatchItemSink, tag = 0, raw: Buffer | null = null): void {
    const relay = this.relay;
    if (relay !== null) {
      relay.client.submit(relay, raw ?? Buffer.from(JSON.stringify(body)), sink, tag);
      return;
    }
    const stats = this.stats;
    stats.items++;
    if (this.isClosed || this.unresolved >= this.options.maxQueuedItems) {
      stats.rejected++;
      stats.failedItems++;
      if (this.isClosed) sink.onBatchResult(tag, CLOSED_STATUS, CLOSED_BODY, 0);
      else sink.onBatchResult(tag, FULL_STATUS, FULL_BODY, 0);
      return;
    }
    this.unresolved++;
    const codec = this.codec;
    const group = this.options.mode === BatchMode.native ? codec.groupKey(body) : '';
    const dedupKey = this.options.dedup ? codec.dedupKey(body, raw) : null;
    const item = new BatchItem(body, raw, dedupKey, sink, tag);
    const now = nowMs();
    item.submittedMs = now;
    const idle = this.idleFn === null ? this.poolIdle : this.idleFn();
    let w = this.windows.get(group);
    if (w === undefined) {
      if (idle) {
        stats.idlePassThrough++;
        stats.batches++;
        sink.onBatchWindow?.(now, now, 1);
        this.dispatcher.dispatch([item], new BatchRun(now, 1, this.controller));
        return;
      }
      w = new BatchWindow(group, now, this.options.dedup);
      this.windows.set(group, w);
      const waitMs = this.controller.waitMs;
      if (waitMs > 0) w.timer = setTimeout(this.onDeadline, waitMs, w);
    } else {
      const first = w.find(dedupKey);
      if (first !== null) {
        stats.deduplicated++;
        item.nextDuplicate = first.nextDuplicate;
        first.nextDuplicate = item;
        if (idle) this.flush(w);
        return;
      }
    }
    w.add(item);
    if (w.items.length >= this.controller.batchSize) {
      stats.sizeCloses++;
      this.flush(w);
    } else if (idle || w.timer === null) {
      this.flush(w);
    }
  }

  /** Queues one item and resolves with its result. One promise per call: not for the hot path. */
  run(body: object): Promise<BatchResult> {
    const c = new ResultCollector(1);
    this.submit(body, c, 0);
    return c.done.then(firstResult);
  }

  /** Queues several items of one caller; resolves with their results in input order. */
  runAll(bodies: readonly object[]): Promise<BatchResult[]> {
    const c = new ResultCollector(bodies.length);
    for (let i = 0; i < bodies.length; i++) this.submit(bodies[i] as object, c, i);
    return c.done;
  }

  /** Closes every open window now (a drain, or a caller that knows no more items are coming). */
  flushAll(): void {
    for (const w of [...this.windows.values()]) this.flush(w);
  }

  /**
   * Stops accepting items (later ones get 503 at once), dispatches open windows, ends retry
   * backoffs (those items resolve with their last failure) and resolves when every accepted item
   * has resolved. No timer of the batcher is left afterwards. Idempotent.
   */
  close(): Promise<void> {
    if (this.closing !== null) return this.closing;
    this.isClosed = true;
    this.flushAll();
    this.dispatcher.close();
    this.closing =
      this.unresolved === 0
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            this.drained = resolve;
          });
    return this.closing;
  }

  /** Dispatches a window's items, cut into preferred sizes when they are configured. */
  private flush(w: BatchWindow): void {
    if (w.timer !== null) {
      clearTimeout(w.timer);
      w.timer = null;
    }
    if (this.windows.get(w.group) === w) this.windows.delete(w.group);
    const items = w.items;
    if (items.length === 0) return;
    const run = new BatchRun(w.openedAtMs, items.length, this.controller);
    const sizes = this.options.preferredSizes;
    if (sizes.length === 0 || sizes.includes(items.length)) {
      this.stats.batches++;
      reportWindow(items, 0, items.length);
      this.dispatcher.dispatch(items, run);
      return;
    }
    for (let start = 0; start < items.length;) {
      const left = items.length - start;
      let size = left;
      for (const s of sizes) if (s <= left) size = s;
      if (size > left) size = left;
      this.stats.batches++;
      reportWindow(items, start, size);
      this.dispatcher.dispatch(items.slice(start, start + size), run);
      start += size;
    }
  }

  private readonly onDeadline = (w: BatchWindow): void => {
    w.timer = null;
    this.stats.timeCloses++;
    this.flush(w);
  };

  private readonly itemSettled = (): void => {
    if (--this.unresolved === 0 && this.drained !== null) {
      const done = this.drained;
      this.drained = null;
      done();
    }
  };
}

function firstResult(results: BatchResult[]): BatchResult {
  return results[0] as BatchResult;
}

/**
 * Builds a route's micro-batcher. Throws `RangeError` for invalid options (call it when compiling
 * the plan, not per request).
 *
 * @example
 * const batcher = createMicroBatcher({
 *   mode: 'native',
 *   codec: openAiEmbeddingsCodec,
 *   upstream: pool, // a BatchNodePicker
 *   maxBatchSize: 64,
 *   maxWaitMs: 5,
 *   targetLatencyMs: 200,
 *   idle: () => pool.hasIdleNode(),
 * });
 * batcher.submit(body, session, 0); // session.onBatchResult(0, status, body, attempts)
 */
export function createMicroBatcher(options: MicroBatchOptions): MicroBatcher {
  return new MicroBatcher(options);
}

/** Tells each sink of `items[start, start + size)` (and their duplicates) how long it waited and with how many. */
function reportWindow(items: readonly BatchItem[], start: number, size: number): void {
  const now = nowMs();
  for (let i = start; i < start + size; i++) {
    for (let it: BatchItem | null = items[i]!; it !== null; it = it.nextDuplicate)
      it.sink.onBatchWindow?.(it.submittedMs, now, size);
  }
}
