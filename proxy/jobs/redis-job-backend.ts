/**
 * The Redis `JobBackend`: several Sluice instances share one durable batch queue. Files, batches,
 * items and results live in hashes (`redis-job-keys.ts`); runnable items flow through one stream
 * per deployment (`{prefix}queue`) read through a consumer group, each worker id a consumer. Every
 * read-then-write step is one Lua script, so a result is written exactly once and the counters
 * never drift. A lease is a deadline in a sorted set on the backend's clock (as in the SQLite
 * backend); an expired one is taken over with XCLAIM, and retries wait in a sorted set until due.
 * This module holds the worker side and the sweep, and delegates files and batches to
 * `redis-job-files.ts` and `redis-job-batches.ts`. Nothing here executes an item or writes HTTP.
 *
 * Durability: an acknowledged call is as durable as the Redis server makes it. Run Redis with AOF
 * (`appendonly yes`) and `appendfsync everysec` (a power loss may lose the last second: an item
 * then runs again, or a just-created batch is gone and the client retries) or `appendfsync always`
 * (nothing acknowledged is lost). Without persistence a Redis restart loses every batch. Standalone
 * Redis or a Sentinel-managed primary only: the scripts touch keys they compute, which Redis
 * Cluster does not allow. Instances' clocks should agree (NTP): a skew shortens or lengthens
 * leases and retry delays by that much.
 */

import { batchRules, type BatchRuleOptions } from './batch-params.js';
import type { ItemFailure, RecordOutcome } from './item-queue.js';
import type { JobBackend, ListOptions } from './job-backend.js';
import {
  storedOriginHeaders,
  UNKNOWN_ORIGIN,
  type BatchOrigin,
  type CreateBatchParams,
  type CreateFileParams,
} from './job-store.js';
import type { BatchObject, FileObject, ItemResult, JobItem, ListPage } from './job-types.js';
import { END_BATCH, EXPIRE } from './redis-job-batch-scripts.js';
import { RedisJobBatches } from './redis-job-batches.js';
import {
  connectRedisJobs,
  type RedisJobConnection,
  type RedisJobConnectionOptions,
} from './redis-job-connection.js';
import { RedisJobFiles } from './redis-job-files.js';
import {
  BACKLOG,
  CLAIM,
  POISON,
  PRUNE_CONSUMERS,
  RECORD,
  RETRY_LATER,
  UNCLAIM,
} from './redis-job-queue-scripts.js';
import { encodeFailure, encodeResult } from './redis-job-results.js';

/** Options of `createRedisJobBackend` (YAML: `jobs.redis`): the connection plus the batch rules. */
export interface RedisJobBackendOptions extends RedisJobConnectionOptions, BatchRuleOptions {
  /** Items per write or script step: a big batch is stored, cancelled or expired in steps of this size. Default 1000. */
  chunkSize?: number;
}
/** How often a backend prunes idle consumers from the group, ms. */
const PRUNE_EVERY_MS = 60_000;
/** A consumer with nothing pending and idle this long is a worker gone for good, ms. */
const CONSUMER_IDLE_MS = 3_600_000;

/** A claimed item as the claim script returns it (host and headers null for a batch stored without them). */
type ClaimedRow = [
  id: number,
  batchId: string,
  index: string,
  attempts: number,
  owner: string,
  customId: string,
  request: string,
  host: string | null,
  headers: string | null,
];

/**
 * A `JobBackend` on one Redis connection. Create it with `createRedisJobBackend`; each Sluice
 * instance has its own, all pointing at the same server and prefix.
 */
export class RedisJobBackend implements JobBackend {
  readonly kind = 'redis';
  private readonly files: RedisJobFiles;
  private readonly batches: RedisJobBatches;
  private prunedAt = -Infinity; // ms since the epoch

  constructor(
    private readonly conn: RedisJobConnection,
    opts: Omit<RedisJobBackendOptions, keyof RedisJobConnectionOptions> = {},
  ) {
    const chunk = Math.max(1, Math.floor(opts.chunkSize ?? 1000));
    const rules = batchRules(opts);
    this.files = new RedisJobFiles(conn, rules.limits, chunk);
    this.batches = new RedisJobBatches(conn, this.files, rules, chunk);
  }

  /** False while Redis is known to be unavailable; its loss and recovery are logged once. */
  get available(): boolean {
    return this.conn.available;
  }

  // ---- client side ----

  createFile(owner: string, params: CreateFileParams): Promise<FileObject> {
    return this.files.create(owner, params);
  }

  getFile(owner: string, id: string): Promise<FileObject> {
    return this.files.get(owner, id);
  }

  listFiles(owner: string, opts?: ListOptions): Promise<ListPage<FileObject>> {
    return this.files.list(owner, opts);
  }

  fileContent(owner: string, id: string): Promise<string> {
    return this.files.content(owner, id);
  }

  deleteFile(owner: string, id: string): Promise<{ id: string; object: 'file'; deleted: true }> {
    return this.files.delete(owner, id);
  }

  createBatch(owner: string, params: CreateBatchParams, origin?: BatchOrigin): Promise<BatchObject> {
    return this.batches.create(owner, params, origin);
  }

  getBatch(owner: string, id: string): Promise<BatchObject> {
    return this.batches.get(owner, id);
  }

  listBatches(owner: string, opts?: ListOptions): Promise<ListPage<BatchObject>> {
    return this.batches.list(owner, opts);
  }

  cancelBatch(owner: string, id: string): Promise<BatchObject> {
    return this.batches.cancel(owner, id);
  }

  // ---- worker side ----

  /**
   * See `JobBackend.claim`. One script requeues due retries, takes over expired leases, then reads
   * new stream entries; entries of batches that no longer run are acked and dropped on the way. A
   * claim that timed out but ran after all gives its items back when its reply comes: they would
   * otherwise wait out their lease unrun, each with an attempt counted against it.
   */
  async claim(workerId: string, max: number, leaseMs: number): Promise<JobItem[]> {
    if (max <= 0) return [];
    const rows = await this.conn.run<ClaimedRow[]>(
      CLAIM,
      [workerId, String(Math.floor(max)), String(Math.max(0, Math.ceil(leaseMs)))],
      (late) => this.unclaim(workerId, late),
    );
    const items = rows.map(
      ([id, batchId, index, attempts, owner, customId, request, host, headers]): JobItem => {
        const [method, url, body, raw] = JSON.parse(request) as [string, string, unknown, unknown];
        return {
          id: Number(id),
          batchId,
          owner,
          host: typeof host === 'string' ? host : UNKNOWN_ORIGIN.host,
          headers: storedOriginHeaders(headers),
          index: Number(index),
          customId,
          method,
          url,
          // The source text when stored (an item written by an earlier version has only the object).
          body: typeof raw === 'string' ? raw : JSON.stringify(body),
          attempts: Number(attempts),
        };
      },
    );
    // Item ids follow batch creation, then input order: this is oldest batch, lowest index first.
    return items.sort((a, b) => a.id - b.id);
  }

  /** Hands back items of a claim whose caller gave up; a failure leaves them to their lease expiry. */
  private unclaim(workerId: string, rows: ClaimedRow[]): void {
    for (const [id, , , attempts] of rows) {
      this.conn.run(UNCLAIM, [String(id), workerId, String(attempts)]).catch(() => undefined);
    }
  }

  /** See `JobBackend.record`. */
  async record(item: JobItem, result: ItemResult): Promise<RecordOutcome> {
    const { outcome, json } = encodeResult(result);
    return this.conn.run<RecordOutcome>(RECORD, [item.batchId, String(item.index), outcome, json]);
  }

  /** See `JobBackend.fail`. */
  async fail(item: JobItem, failure: ItemFailure): Promise<RecordOutcome> {
    const { outcome, json } = encodeFailure(failure);
    return this.conn.run<RecordOutcome>(RECORD, [item.batchId, String(item.index), outcome, json]);
  }

  /** See `JobBackend.retryLater`. The item waits in the retry set, then goes back to the end of the stream. */
  async retryLater(item: JobItem, workerId: string, delayMs: number): Promise<boolean> {
    const done = await this.conn.run<number>(RETRY_LATER, [
      String(item.id),
      workerId,
      String(Math.max(0, Math.ceil(delayMs))),
    ]);
    return done === 1;
  }

  /**
   * See `JobBackend.sweep`. Fails poisoned items (lease expired after `maxAttempts` claims), then
   * walks the batches that are not terminal: resumes a feed its creator left unfinished, expires
   * overdue batches, ends cancelling ones with nothing in flight and completes finalizing ones.
   * Every step is idempotent, so all instances may sweep at once.
   */
  async sweep(maxAttempts: number): Promise<number> {
    const keys = this.conn.keys;
    let changed = await this.conn.run<number>(POISON, [String(maxAttempts)]);
    const ids = await this.conn.send<string[]>(['ZRANGE', keys.active, '0', '-1']);
    const rows = await Promise.all(
      ids.map((id) =>
        this.conn.send<(string | null)[]>([
          'HMGET',
          keys.batch(id),
          'status',
          'ending',
          'expires_at',
          'queued',
          'total',
        ]),
      ),
    );
    const nowS = Math.floor(this.conn.clock() / 1000);
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const [status, ending, expiresAt, queued, total] = rows[i] ?? [];
      if (status === null || status === undefined) continue;
      if (Number(queued) < Number(total)) await this.batches.feed(id, Number(queued));
      const running = status === 'validating' || status === 'in_progress';
      if (ending === 'expired' || (running && Number(expiresAt) <= nowS)) {
        if ((await this.conn.run<number>(EXPIRE, [id])) === 1) {
          await this.batches.failUnfinished(id, 'expire');
          changed += await this.conn.run<number>(END_BATCH, [id, 'expire']);
        }
      } else if (status === 'cancelling') {
        await this.batches.failUnfinished(id, 'cancel');
        changed += await this.conn.run<number>(END_BATCH, [id, 'cancel']);
      } else if (status === 'finalizing') {
        changed += await this.conn.run<number>(END_BATCH, [id, 'finalize']);
      }
    }
    if (this.conn.clock() - this.prunedAt >= PRUNE_EVERY_MS) {
      this.prunedAt = this.conn.clock();
      await this.conn.run(PRUNE_CONSUMERS, [String(CONSUMER_IDLE_MS)]);
    }
    return changed;
  }

  /** See `JobBackend.finalize`. */
  async finalize(batchId: string): Promise<void> {
    await this.conn.run(END_BATCH, [batchId, 'finalize']);
  }

  /** See `JobBackend.hasWork`. */
  async hasWork(): Promise<boolean> {
    return (await this.conn.send<number>(['ZCARD', this.conn.keys.active])) > 0;
  }

  /** See `JobBackend.backlog`. */
  backlog(): Promise<number> {
    return this.conn.run<number>(BACKLOG, []);
  }

  /** Waits for replies in flight and disconnects; the data stays in Redis. */
  close(): Promise<void> {
    return this.conn.close();
  }
}

/**
 * Connects to Redis and returns a backend over it. Rejects when no connection is made within
 * `connectTimeoutMs` (fail fast at startup); afterwards the client reconnects by itself and calls
 * made while it is down reject at once (the HTTP layer answers 503, the worker retries later).
 *
 * @example
 * const jobs = await createRedisJobBackend({ url: 'redis://redis:6379', prefix: 'sluice:jobs:' });
 * const worker = new JobWorker(jobs, executor, { concurrency: 8 });
 */
export async function createRedisJobBackend(opts: RedisJobBackendOptions): Promise<RedisJobBackend> {
  return new RedisJobBackend(await connectRedisJobs(opts), opts);
}
