/**
 * The embedded `JobBackend`: one SQLite file (`job-db.ts`) holding files, batches and items, read
 * and written through `JobStore` (client side) and `ItemQueue` (worker side). It adapts their
 * synchronous transactions to the async interface and adds no behaviour of its own.
 */

import type { JobBackend, ListOptions } from './job-backend.js';
import { openJobDb, type JobDb, type JobDbOptions } from './job-db.js';
import { ItemQueue, type ItemFailure, type RecordOutcome } from './item-queue.js';
import {
  JobStore,
  type BatchOrigin,
  type CreateBatchParams,
  type CreateFileParams,
  type JobStoreOptions,
} from './job-store.js';
import type { BatchObject, FileObject, ItemResult, JobItem, ListPage } from './job-types.js';

/** Options of a `SqliteJobBackend`: those of `JobStore` (clock, endpoints, completion windows, input limits). */
export type SqliteJobBackendOptions = JobStoreOptions;

/**
 * A `JobBackend` over one open job database. Several processes may each run one over the same
 * file; SQLite serialises their writes and leases keep their workers apart. `close()` closes the
 * connection, so anything else using it (the idempotency store) must be done first.
 */
export class SqliteJobBackend implements JobBackend {
  readonly kind = 'sqlite';
  /** The synchronous store behind the client-side calls, for callers that need no promise (tests). */
  readonly store: JobStore;
  private readonly queue: ItemQueue;

  constructor(
    readonly db: JobDb,
    opts: SqliteJobBackendOptions = {},
  ) {
    this.store = new JobStore(db, opts);
    this.queue = new ItemQueue(db, opts.clock);
  }

  async createFile(owner: string, params: CreateFileParams): Promise<FileObject> {
    return this.store.createFile(owner, params);
  }

  async getFile(owner: string, id: string): Promise<FileObject> {
    return this.store.getFile(owner, id);
  }

  async listFiles(owner: string, opts?: ListOptions): Promise<ListPage<FileObject>> {
    return this.store.listFiles(owner, opts);
  }

  async fileContent(owner: string, id: string): Promise<string> {
    return this.store.fileContent(owner, id);
  }

  async deleteFile(owner: string, id: string): Promise<{ id: string; object: 'file'; deleted: true }> {
    return this.store.deleteFile(owner, id);
  }

  async createBatch(owner: string, params: CreateBatchParams, origin?: BatchOrigin): Promise<BatchObject> {
    return this.store.createBatch(owner, params, origin);
  }

  async getBatch(owner: string, id: string): Promise<BatchObject> {
    return this.store.getBatch(owner, id);
  }

  async listBatches(owner: string, opts?: ListOptions): Promise<ListPage<BatchObject>> {
    return this.store.listBatches(owner, opts);
  }

  async cancelBatch(owner: string, id: string): Promise<BatchObject> {
    return this.store.cancelBatch(owner, id);
  }

  async claim(workerId: string, max: number, leaseMs: number): Promise<JobItem[]> {
    return this.queue.claim(workerId, max, leaseMs);
  }

  async record(item: JobItem, result: ItemResult): Promise<RecordOutcome> {
    return this.queue.record(item.id, result);
  }

  async fail(item: JobItem, failure: ItemFailure): Promise<RecordOutcome> {
    return this.queue.fail(item.id, failure);
  }

  async retryLater(item: JobItem, workerId: string, delayMs: number): Promise<boolean> {
    return this.queue.retryLater(item.id, workerId, delayMs);
  }

  async sweep(maxAttempts: number): Promise<number> {
    return this.queue.sweep(maxAttempts);
  }

  async finalize(batchId: string): Promise<void> {
    this.queue.finalize(batchId);
  }

  async hasWork(): Promise<boolean> {
    return this.queue.hasWork();
  }

  async backlog(): Promise<number> {
    return this.queue.backlog();
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

/**
 * Opens (creating when missing) the job database at `path` and returns a backend over it; the
 * backend's `close()` closes the database. Throws like `openJobDb` (a file from a newer schema).
 *
 * @example
 * const jobs = createSqliteJobBackend('/var/lib/sluice/jobs.db', { durability: 'full' });
 * const file = await jobs.createFile(tenant, { filename: 'in.jsonl', purpose: 'batch', content });
 */
export function createSqliteJobBackend(
  path: string,
  opts: SqliteJobBackendOptions & JobDbOptions = {},
): SqliteJobBackend {
  return new SqliteJobBackend(openJobDb(path, opts), opts);
}
