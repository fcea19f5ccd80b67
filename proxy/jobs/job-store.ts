/**
 * The OpenAI-compatible batch model over SQLite: uploaded files (create, get, list, delete),
 * batches (create, get, list, cancel) and their output and error files, each scoped to the tenant
 * that owns it. Every call is one synchronous transaction, so a batch and all its items are on disk
 * before `createBatch` returns. It never executes items: that is `job-worker.ts`, through
 * `item-queue.ts`.
 */

import { parseBatchInput } from './batch-input.js';
import {
  batchRules,
  checkBatchParams,
  checkUpload,
  endpointMismatches,
  type BatchRuleOptions,
  type BatchRules,
} from './batch-params.js';
import {
  CANCELLED_ITEM,
  failUnfinishedItems,
  finishBatch,
  newId,
  NEXT_FILE_SEQ,
  renderBatchFile,
  unfinishedItems,
} from './batch-files.js';
import type { ListOptions } from './job-backend.js';
import type { JobDb } from './job-db.js';
import { JobError, JobErrors } from './job-errors.js';
import { TERMINAL_STATUSES, type BatchErrorEntry, type BatchObject } from './job-types.js';
import type { FileObject, ListPage } from './job-types.js';
import { DELETED_FILE_CURSOR_TTL_MS, pageSize, toPage, unknownCursor } from './list-page.js';

/** Options of a `JobStore`: the batch rules (endpoints, completion windows, input limits) and a clock. */
export interface JobStoreOptions extends BatchRuleOptions {
  /** Wall clock, ms since the epoch. Default `Date.now`. */
  clock?: () => number;
}

/** Arguments of `createFile` (the multipart fields of `POST /v1/files`). */
export interface CreateFileParams {
  filename: string;
  /** Only `batch` is accepted. */
  purpose: string;
  content: string | Buffer;
}

/** Arguments of `createBatch` (the JSON body of `POST /v1/batches`). */
export interface CreateBatchParams {
  input_file_id: string;
  endpoint: string;
  completion_window: string;
  metadata?: Record<string, string> | null;
}

/**
 * Where the request that created a batch came from, as far as routing goes: each item runs with
 * this host and these headers (`JobItem.host`, `JobItem.headers`), so routes match its items as
 * they matched the caller's own requests.
 */
export interface BatchOrigin {
  /** Host without port, lower-case. */
  host: string;
  /** Headers routes match on (`match.headers`), flat `[name, value, ...]`, lower-case names; never credentials. */
  headers: readonly string[];
}

/** The origin of a batch created without one (and of batches stored before origins were kept). */
export const UNKNOWN_ORIGIN: BatchOrigin = Object.freeze({ host: 'localhost', headers: Object.freeze([]) });

/** A stored origin's headers (JSON text, or null); anything but a flat list of strings reads as none. */
export function storedOriginHeaders(text: string | null | undefined): string[] {
  if (text === null || text === undefined || text === '') return [];
  try {
    const v: unknown = JSON.parse(text);
    if (Array.isArray(v) && v.length % 2 === 0 && v.every((x) => typeof x === 'string')) return v;
  } catch {
    // A damaged value: the item runs without client headers, as before they were kept.
  }
  return [];
}

/** A `job_batches` row: the batch object's own columns, its JSON columns as text, and its counts flat. */
type BatchRow = Omit<BatchObject, 'object' | 'errors' | 'metadata' | 'request_counts'> & {
  owner: string;
  seq: number;
  host: string | null;
  headers: string | null;
  errors: string | null;
  metadata: string | null;
  total: number;
  completed: number;
  failed: number;
};

interface FileRow {
  id: string;
  owner: string;
  purpose: string;
  filename: string;
  bytes: number;
  created_at: number;
  /** Listing order. */
  seq: number;
  content: Buffer | null;
  batch_id: string | null;
  kind: 'upload' | 'output' | 'error';
}

/** The columns of a file row without its content, for lists. */
const FILE_COLUMNS = 'id, owner, purpose, filename, bytes, created_at, seq, NULL AS content, batch_id, kind';

function toBatch(row: BatchRow): BatchObject {
  const {
    errors,
    metadata,
    total,
    completed,
    failed,
    owner: _owner,
    seq: _seq,
    host: _host,
    headers: _headers,
    ...rest
  } = row;
  return {
    ...rest,
    object: 'batch',
    errors: errors === null ? null : { object: 'list', data: JSON.parse(errors) as BatchErrorEntry[] },
    metadata: metadata === null ? null : (JSON.parse(metadata) as Record<string, string>),
    request_counts: { total, completed, failed },
  };
}

function toFile(row: FileRow): FileObject {
  return {
    id: row.id,
    object: 'file',
    bytes: row.bytes,
    created_at: row.created_at,
    filename: row.filename,
    purpose: row.purpose,
    status: 'processed',
  };
}

/**
 * Files and batches of the batch API. Create one per process over a shared `openJobDb` connection;
 * several processes may share the database file. Every method takes the `owner` (tenant, '' without
 * tenants): a file or batch of another owner is reported as not found, lists show the owner's only.
 *
 * @example
 * const store = new JobStore(openJobDb(path));
 * const file = store.createFile('acme', { filename: 'in.jsonl', purpose: 'batch', content });
 * const batch = store.createBatch('acme', { input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' });
 */
export class JobStore {
  private readonly clock: () => number;
  private readonly rules: BatchRules;

  constructor(
    readonly db: JobDb,
    opts: JobStoreOptions = {},
  ) {
    this.clock = opts.clock ?? Date.now;
    this.rules = batchRules(opts);
  }

  /** Stores an uploaded batch input file after validating every line; throws `JobError` naming the bad line. */
  createFile(owner: string, params: CreateFileParams): FileObject {
    const content = checkUpload(params, this.rules.limits);
    const id = newId('file-');
    this.db
      .prepare(
        `INSERT INTO job_files (id, owner, seq, purpose, filename, bytes, created_at, content, batch_id, kind)
         VALUES (?, ?, ${NEXT_FILE_SEQ}, 'batch', ?, ?, ?, ?, NULL, 'upload')`,
      )
      .run(id, owner, params.filename, content.length, this.nowS(), content);
    return this.getFile(owner, id);
  }

  /** The file object; throws `JobError` 404 when unknown or another owner's. */
  getFile(owner: string, id: string): FileObject {
    return toFile(this.fileRow(owner, id));
  }

  /**
   * Files of `owner` (uploads, output and error files), newest first, `limit` (1..100, default 20)
   * after the file id `after`: one of the owner's files, or one deleted less than
   * `DELETED_FILE_CURSOR_TTL_MS` ago (the page goes on after the place it had). Any other `after`
   * is a `JobError` 400 (`param: after`), never an empty last page.
   */
  listFiles(owner: string, opts: ListOptions = {}): ListPage<FileObject> {
    const limit = pageSize(opts);
    const rows = this.db
      .transaction(() => {
        if (opts.after === undefined) {
          return this.db
            .prepare(`SELECT ${FILE_COLUMNS} FROM job_files WHERE owner = ? ORDER BY seq DESC LIMIT ?`)
            .all(owner, limit + 1);
        }
        const seq = this.fileCursor(owner, opts.after);
        return this.db
          .prepare(
            `SELECT ${FILE_COLUMNS} FROM job_files WHERE owner = ? AND seq < ? ORDER BY seq DESC LIMIT ?`,
          )
          .all(owner, seq, limit + 1);
      })
      .deferred() as FileRow[];
    return toPage(rows.map(toFile), limit);
  }

  /**
   * Deletes a file of `owner`. An upload cannot go while a batch that is not terminal reads it
   * (`JobError` 409 `file_in_use`); output and error files can go at any time (the batch keeps its
   * `output_file_id`, which then answers 404). Throws `JobError` 404 when unknown.
   */
  deleteFile(owner: string, id: string): { id: string; object: 'file'; deleted: true } {
    this.db
      .transaction(() => {
        const row = this.fileRow(owner, id);
        if (row.kind === 'upload') {
          const user = this.db
            .prepare(
              `SELECT id, status FROM job_batches WHERE input_file_id = ?
               AND status NOT IN ('failed', 'completed', 'expired', 'cancelled') LIMIT 1`,
            )
            .get(id) as { id: string; status: string } | undefined;
          if (user !== undefined) {
            throw new JobError(
              JobErrors.fileInUse,
              `file ${id} is the input of batch ${user.id}, which is ${user.status}`,
              'file_id',
            );
          }
        }
        this.db.prepare('DELETE FROM job_files WHERE id = ?').run(id);
        // Its place in the list stays a while, for a cursor that names it (see listFiles).
        const nowMs = this.clock();
        this.db
          .prepare('DELETE FROM job_file_tombstones WHERE deleted_at <= ?')
          .run(nowMs - DELETED_FILE_CURSOR_TTL_MS);
        this.db
          .prepare(
            'INSERT OR REPLACE INTO job_file_tombstones (id, owner, seq, deleted_at) VALUES (?, ?, ?, ?)',
          )
          .run(id, owner, row.seq, nowMs);
      })
      .immediate();
    return { id, object: 'file', deleted: true };
  }

  /**
   * The whole content of a file (`GET /v1/files/{id}/content`), each line ending in `\n`: uploads
   * as stored (blank lines left out), output and error files in input order.
   */
  fileContent(owner: string, id: string): string {
    const row = this.fileRow(owner, id);
    const lines =
      row.kind === 'upload'
        ? (row.content ?? Buffer.alloc(0)).toString('utf8').split('\n')
        : renderBatchFile(this.db, row.batch_id ?? '', row.kind);
    let out = '';
    for (const line of lines) if (line !== '') out += line + '\n';
    return out;
  }

  /**
   * Creates a batch from an uploaded file and stores all its items in the same transaction. Throws
   * `JobError` for an unknown file, an unsupported endpoint or window, or bad metadata. A file whose
   * lines target another URL than `endpoint` gives a batch with status `failed` and the lines in
   * `errors`. Otherwise the batch is `validating` until a worker claims its first item. The input
   * file must be `owner`'s (another owner's is not found).
   */
  createBatch(owner: string, params: CreateBatchParams, origin: BatchOrigin = UNKNOWN_ORIGIN): BatchObject {
    const file = this.fileRow(owner, params.input_file_id);
    const { windowMs, metadata } = checkBatchParams(params, file.kind, this.rules);
    const lines = parseBatchInput((file.content ?? Buffer.alloc(0)).toString('utf8'), this.rules.limits);
    const errors = endpointMismatches(lines, params.endpoint);
    const id = newId('batch_');
    const nowMs = this.clock();
    const nowS = Math.floor(nowMs / 1000);
    this.db
      .transaction(() => {
        const { seq } = this.db.prepare('SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM job_batches').get() as {
          seq: number;
        };
        this.db
          .prepare(
            `INSERT INTO job_batches (id, owner, seq, endpoint, input_file_id, completion_window, status, errors,
             metadata, total, created_at, expires_at, failed_at, host, headers)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          )
          .run(
            id,
            owner,
            seq,
            params.endpoint,
            file.id,
            params.completion_window,
            errors.length > 0 ? 'failed' : 'validating',
            errors.length > 0 ? JSON.stringify(errors) : null,
            metadata === null ? null : JSON.stringify(metadata),
            // A batch refused at validation has no items: its counts stay 0 (completed + failed = total).
            errors.length > 0 ? 0 : lines.length,
            nowS,
            Math.floor((nowMs + windowMs) / 1000),
            errors.length > 0 ? nowS : null,
            origin.host,
            origin.headers.length > 0 ? JSON.stringify(origin.headers) : null,
          );
        if (errors.length > 0) return;
        const insert = this.db.prepare(
          `INSERT INTO job_items (batch_id, idx, custom_id, method, url, body, state) VALUES (?, ?, ?, ?, ?, ?, 'pending')`,
        );
        for (let i = 0; i < lines.length; i++) {
          const l = lines[i]!;
          insert.run(id, i, l.customId, l.method, l.url, l.raw);
        }
      })
      .immediate();
    return this.getBatch(owner, id);
  }

  /** The batch object; throws `JobError` 404 when unknown or another owner's. */
  getBatch(owner: string, id: string): BatchObject {
    const row = this.db.prepare('SELECT * FROM job_batches WHERE id = ? AND owner = ?').get(id, owner) as
      BatchRow | undefined;
    if (row === undefined) throw new JobError(JobErrors.batchNotFound, `no batch ${id}`, 'batch_id');
    return toBatch(row);
  }

  /**
   * Batches of `owner`, newest first, `limit` (1..100, default 20) after the batch id `after`
   * (batches are never deleted: an `after` that is not one of the owner's is a `JobError` 400).
   */
  listBatches(owner: string, opts: ListOptions = {}): ListPage<BatchObject> {
    const limit = pageSize(opts);
    const rows = this.db
      .transaction(() => {
        if (opts.after === undefined) {
          return this.db
            .prepare('SELECT * FROM job_batches WHERE owner = ? ORDER BY seq DESC LIMIT ?')
            .all(owner, limit + 1);
        }
        const seq = this.db
          .prepare('SELECT seq FROM job_batches WHERE id = ? AND owner = ?')
          .pluck()
          .get(opts.after, owner) as number | undefined;
        if (seq === undefined) throw unknownCursor('batch', opts.after);
        return this.db
          .prepare('SELECT * FROM job_batches WHERE owner = ? AND seq < ? ORDER BY seq DESC LIMIT ?')
          .all(owner, seq, limit + 1);
      })
      .deferred() as BatchRow[];
    return toPage(rows.map(toBatch), limit);
  }

  /**
   * Cancels a batch: items not yet started are failed with `batch_cancelled` at once; items a
   * worker holds finish normally. Returns `cancelled` when nothing was in flight, else `cancelling`
   * (the worker ends it when its last item returns). Throws `JobError` 409 for a finished batch,
   * 404 for an unknown batch or another owner's.
   */
  cancelBatch(owner: string, id: string): BatchObject {
    this.db
      .transaction(() => {
        const batch = this.getBatch(owner, id);
        if (batch.status === 'cancelling') return;
        if (TERMINAL_STATUSES.has(batch.status) || batch.status === 'finalizing') {
          throw new JobError(
            JobErrors.cannotCancel,
            `cannot cancel a batch with status ${batch.status}`,
            'batch_id',
          );
        }
        const nowMs = this.clock();
        const nowS = Math.floor(nowMs / 1000);
        this.db
          .prepare("UPDATE job_batches SET status = 'cancelling', cancelling_at = ? WHERE id = ?")
          .run(nowS, id);
        failUnfinishedItems(this.db, id, CANCELLED_ITEM, nowMs, false);
        if (unfinishedItems(this.db, id) === 0) finishBatch(this.db, id, 'cancelled', nowS);
      })
      .immediate();
    return this.getBatch(owner, id);
  }

  /** The listing place of `owner`'s file `after`, or of one it deleted recently; `JobError` 400 otherwise. */
  private fileCursor(owner: string, after: string): number {
    const live = this.db
      .prepare('SELECT seq FROM job_files WHERE id = ? AND owner = ?')
      .pluck()
      .get(after, owner) as number | undefined;
    if (live !== undefined) return live;
    const gone = this.db
      .prepare('SELECT seq FROM job_file_tombstones WHERE id = ? AND owner = ? AND deleted_at > ?')
      .pluck()
      .get(after, owner, this.clock() - DELETED_FILE_CURSOR_TTL_MS) as number | undefined;
    if (gone !== undefined) return gone;
    throw unknownCursor('file', after);
  }

  private fileRow(owner: string, id: string): FileRow {
    const row = this.db.prepare('SELECT * FROM job_files WHERE id = ? AND owner = ?').get(id, owner) as
      FileRow | undefined;
    if (row === undefined) throw new JobError(JobErrors.fileNotFound, `no file ${id}`, 'file_id');
    return row;
  }

  private nowS(): number {
    return Math.floor(this.clock() / 1000);
  }
}
