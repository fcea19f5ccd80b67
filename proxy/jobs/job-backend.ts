/**
 * The one interface the batch API and the job worker use to reach durable batch state, whatever
 * holds it: SQLite (the embedded default, `sqlite-job-backend.ts`) or Redis streams with consumer
 * groups (several Sluice instances share one queue, `redis-job-backend.ts`). Every method is async
 * so both fit; nothing here executes an item or writes HTTP.
 *
 * Ownership: files and batches belong to the tenant that created them (`owner`, '' when no tenants
 * are configured). A lookup by another owner behaves as if the id did not exist (404).
 */

import type { BatchOrigin, CreateBatchParams, CreateFileParams } from './job-store.js';
import type { ItemFailure, RecordOutcome } from './item-queue.js';
import type { BatchObject, FileObject, ItemResult, JobItem, ListPage } from './job-types.js';

/** Cursor options of a list call: `limit` 1..100 (default 20) after the id `after`. */
export interface ListOptions {
  after?: string;
  limit?: number;
}

/**
 * Durable batch state. Client-side calls throw `JobError` for anything the caller got wrong (bad
 * JSONL with its line, unknown id, cancel of a finished batch); any other rejection is a backend
 * failure (disk, Redis down) that the HTTP layer answers with 503.
 */
export interface JobBackend {
  /** `sqlite` or `redis`, for logs and metrics. */
  readonly kind: string;

  // ---- client side (the HTTP endpoints) ----

  /** Validates and stores an uploaded JSONL file (`purpose` must be `batch`). */
  createFile(owner: string, params: CreateFileParams): Promise<FileObject>;
  /** The file object; `JobError` 404 when unknown or owned by someone else. */
  getFile(owner: string, id: string): Promise<FileObject>;
  /**
   * Files of `owner` (uploads, output and error files), newest first. `after` may name a file the
   * owner deleted less than `DELETED_FILE_CURSOR_TTL_MS` ago (the page goes on after its place);
   * an `after` that is neither is a `JobError` 400 with `param: after`.
   */
  listFiles(owner: string, opts?: ListOptions): Promise<ListPage<FileObject>>;
  /** The content of a file, each line ending in `\n`: uploads as stored, output and error files in input order. */
  fileContent(owner: string, id: string): Promise<string>;
  /**
   * Deletes a file: an upload, or an output or error file. `JobError` 409 (`file_in_use`) for an
   * upload that a batch not yet terminal reads; 404 when unknown or another owner's.
   */
  deleteFile(owner: string, id: string): Promise<{ id: string; object: 'file'; deleted: true }>;
  /**
   * Creates a batch and stores every item before resolving (status `validating`, or `failed` with
   * line errors). `origin` (default `localhost`, no headers) is kept with the batch and handed out
   * with each of its items (`JobItem.host`, `JobItem.headers`).
   */
  createBatch(owner: string, params: CreateBatchParams, origin?: BatchOrigin): Promise<BatchObject>;
  /** The batch object; `JobError` 404 when unknown or owned by someone else. */
  getBatch(owner: string, id: string): Promise<BatchObject>;
  /** Batches of `owner`, newest first; an `after` that is not one of them is a `JobError` 400 (`param: after`). */
  listBatches(owner: string, opts?: ListOptions): Promise<ListPage<BatchObject>>;
  /** `cancelling`, or `cancelled` when nothing was in flight; `JobError` 409 for a finished batch. */
  cancelBatch(owner: string, id: string): Promise<BatchObject>;

  // ---- worker side (job-worker.ts) ----

  /**
   * Leases up to `max` runnable items (pending, or with an expired lease) to `workerId` for
   * `leaseMs`, oldest batch and lowest index first; moves their batches to `in_progress`.
   */
  claim(workerId: string, max: number, leaseMs: number): Promise<JobItem[]>;
  /** Records an item's response exactly once (`duplicate` when it already had a result). */
  record(item: JobItem, result: ItemResult): Promise<RecordOutcome>;
  /** Records a final failure without a response, same exactly-once rule. */
  fail(item: JobItem, failure: ItemFailure): Promise<RecordOutcome>;
  /** Puts an item back for another attempt in `delayMs`, if `workerId` still holds it. */
  retryLater(item: JobItem, workerId: string, delayMs: number): Promise<boolean>;
  /** Expires, cancels, finalizes and poisons (attempts used up) as due; returns how many changed. */
  sweep(maxAttempts: number): Promise<number>;
  /** Completes a batch left in `finalizing`. */
  finalize(batchId: string): Promise<void>;
  /** True while some batch is not terminal. */
  hasWork(): Promise<boolean>;
  /** Items not yet finished across every batch (pending or leased), for metrics and capacity. */
  backlog(): Promise<number>;

  /** Releases connections; the data stays. */
  close(): Promise<void>;
}
