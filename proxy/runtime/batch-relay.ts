/**
 * Micro-batching with `server.workers`: every item is batched by the main thread, whichever thread
 * took its request, so one route has one set of windows (and one `max_concurrent_per_node`) for the
 * whole process, as with one thread. A worker thread still authenticates, limits and admits the
 * request; only the batch item crosses: its body's bytes go to the main thread, which puts them in
 * its own batcher for the same route, pool and path, and its result comes back (status, body,
 * attempts, the wait in the window and the batch's size). One message each way per item.
 *
 * When the main thread has no such batcher (a reload removed the batching, the batcher is closing
 * at shutdown) it declines the item, and the worker sends the request to a node alone, as a route
 * without batching would: no item is lost between the threads.
 *
 * Worker side: `BatchRelayClient`, whose `target` is set on each of the worker's batchers
 * (`MicroBatcher.relay`). Main side: `acceptRelayedItem`.
 */
import type { BatchItemSink } from '../batch/batch-item.js';
import { CLOSED_BODY, CLOSED_STATUS } from '../batch/item-errors.js';
import type { MicroBatcher } from '../batch/micro-batcher.js';
import { nowMs } from '../lifecycle/clock.js';
import type { Plan } from '../plan/plan.js';
import { bufferOf, exact, RelayIds } from './relay-wire.js';

/** A batch item sent by a worker thread to the main thread. */
export interface RelayedItem {
  t: 'batch-item';
  /** The worker's number for the item (unique among its items in flight). */
  id: number;
  /**
   * The route's position in the config and its batcher's position in the route (the main thread's
   * plan of the same config has them there), with the names that must be found there: a reload
   * one thread has applied and the other not yet is told by a name that does not match.
   */
  routeAt: number;
  batcherAt: number;
  route: string;
  pool: string;
  /** The path of the batch calls (`MicroBatcher` of that route and pool serving it). */
  path: string;
  body: Uint8Array;
}

/** The main thread's answer to a relayed item. */
export interface RelayedResult {
  t: 'batch-done';
  id: number;
  /** The item's status; 0: declined, the worker sends the request alone. */
  status: number;
  body: Uint8Array;
  attempts: number;
  /** How long the item waited for its batch in the main thread, ms, and the batch's size (0: none). */
  waitMs: number;
  size: number;
}

/** The answer that declines item `id`. */
function declined(id: number): RelayedResult {
  return { t: 'batch-done', id, status: 0, body: EMPTY, attempts: 0, waitMs: 0, size: 0 };
}

const EMPTY = new Uint8Array(0);

/** One relayed item waiting for its result in the worker. */
interface Waiting {
  sink: BatchItemSink;
  tag: number;
  submittedMs: number;
}

/** Where one of the worker's batchers sends its items. */
export class RelayTarget {
  readonly client: BatchRelayClient;
  readonly routeAt: number;
  readonly batcherAt: number;
  readonly route: string;
  readonly pool: string;
  readonly path: string;

  constructor(
    client: BatchRelayClient,
    routeAt: number,
    batcherAt: number,
    route: string,
    pool: string,
    path: string,
  ) {
    this.client = client;
    this.routeAt = routeAt;
    this.batcherAt = batcherAt;
    this.route = route;
    this.pool = pool;
    this.path = path;
  }
}

/** A worker thread's side: sends items to the main thread and hands their results to their sinks. */
export class BatchRelayClient {
  private readonly post: (m: RelayedItem) => void;
  private readonly waiting = new Map<number, Waiting>();
  private readonly ids = new RelayIds();

  constructor(post: (m: RelayedItem) => void) {
    this.post = post;
  }

  /** Items sent and not answered yet. */
  get pending(): number {
    return this.waiting.size;
  }

  /** Sends one item of `target`'s batcher to the main thread. */
  submit(target: RelayTarget, raw: Buffer, sink: BatchItemSink, tag: number): void {
    const id = this.ids.next();
    this.waiting.set(id, { sink, tag, submittedMs: nowMs() });
    this.post({
      t: 'batch-item',
      id,
      routeAt: target.routeAt,
      batcherAt: target.batcherAt,
      route: target.route,
      pool: target.pool,
      path: target.path,
      body: exact(raw),
    });
  }

  /** The main thread answered item `m.id`. */
  done(m: RelayedResult): void {
    const w = this.waiting.get(m.id);
    if (w === undefined) return;
    this.waiting.delete(m.id);
    const sink = w.sink;
    if (m.status === 0) {
      if (sink.onBatchDeclined !== undefined) sink.onBatchDeclined(w.tag);
      else sink.onBatchResult(w.tag, CLOSED_STATUS, CLOSED_BODY, 0);
      return;
    }
    if (m.size > 0) sink.onBatchWindow?.(w.submittedMs, w.submittedMs + m.waitMs, m.size);
    sink.onBatchResult(w.tag, m.status, bufferOf(m.body), m.attempts);
  }
}

/** The main thread's sink for one relayed item: posts its result back to the worker. */
class RelayedItemSink implements BatchItemSink {
  private readonly reply: (m: RelayedResult) => void;
  private readonly id: number;
  private waitMs = 0;
  private size = 0;

  constructor(reply: (m: RelayedResult) => void, id: number) {
    this.reply = reply;
    this.id = id;
  }

  onBatchWindow(submittedMs: number, sentMs: number, size: number): void {
    this.waitMs = sentMs - submittedMs;
    this.size = size;
  }

  onBatchResult(_tag: number, status: number, body: Buffer, attempts: number): void {
    this.reply({
      t: 'batch-done',
      id: this.id,
      status,
      body: exact(body),
      attempts,
      waitMs: this.waitMs,
      size: this.size,
    });
  }
}

/** The batcher of `plan` for a relayed item, or null when there is none (or it is closing). */
function batcherOf(plan: Plan, m: RelayedItem): MicroBatcher | null {
  // By position, checked by name: no search by name per item.
  const route = plan.routes.routes[m.routeAt];
  if (route === undefined || route.name !== m.route) return null;
  const b = route.batchers?.[m.batcherAt];
  if (b === undefined || b.pool.name !== m.pool) return null;
  if (b.onlyPath !== null && b.onlyPath !== m.path) return null;
  return b.batcher.closed ? null : b.batcher;
}

/**
 * The main thread's side: batches the item `m` a worker sent, in the current plan's batcher of the
 * same route and pool, and answers through `reply` once (at once, declined, when there is no such
 * batcher or the body is not a JSON object it accepts). The body is parsed again here: an object
 * does not cross threads cheaper than its bytes do.
 */
export function acceptRelayedItem(plan: Plan, m: RelayedItem, reply: (r: RelayedResult) => void): void {
  const batcher = batcherOf(plan, m);
  if (batcher === null) {
    reply(declined(m.id));
    return;
  }
  const raw = bufferOf(m.body);
  let body: unknown = null;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    body = null;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body) || !batcher.accepts(body)) {
    reply(declined(m.id));
    return;
  }
  batcher.submit(body, new RelayedItemSink(reply, m.id), 0, raw);
}
