/**
 * Batches of the Redis batch-job backend: create (items staged under a TTL, then one commit script
 * makes the batch visible, then its items are fed to the queue stream in resumable steps), get,
 * list, cancel, and the stepwise failing of what a cancelled or expired batch left unfinished.
 * Every call is scoped to an owner. It never claims or records items.
 */

import { CANCELLED_ITEM, EXPIRED_ITEM, newId } from './batch-files.js';
import { checkBatchParams, endpointMismatches, type BatchRules } from './batch-params.js';
import { parseBatchInput } from './batch-input.js';
import type { ListOptions } from './job-backend.js';
import { JobError, JobErrors } from './job-errors.js';
import { UNKNOWN_ORIGIN, type BatchOrigin, type CreateBatchParams } from './job-store.js';
import type { BatchErrorEntry, BatchObject, BatchStatus, ListPage } from './job-types.js';
import { CANCEL, COMMIT_BATCH, END_BATCH, FAIL_RANGE, FEED } from './redis-job-batch-scripts.js';
import type { RedisJobConnection } from './redis-job-connection.js';
import type { RedisJobFiles } from './redis-job-files.js';
import { pageSize, toPage } from './list-page.js';
import { pageIds } from './redis-job-lists.js';

/** Staged items that no commit claimed expire after this long, ms. */
const STAGING_TTL_MS = 86_400_000;

/** An `HGETALL` reply as an object: RESP3 gives a map, RESP2 a flat field/value list. */
function hashOf(reply: unknown): Record<string, string> {
  if (!Array.isArray(reply)) return (reply ?? {}) as Record<string, string>;
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
  return out;
}

function toBatch(h: Record<string, string>): BatchObject {
  const at = (k: string): number | null => (h[k] === undefined ? null : Number(h[k]));
  return {
    id: h['id'] ?? '',
    object: 'batch',
    endpoint: h['endpoint'] ?? '',
    errors:
      h['errors'] === undefined
        ? null
        : { object: 'list', data: JSON.parse(h['errors']) as BatchErrorEntry[] },
    input_file_id: h['input_file_id'] ?? '',
    completion_window: h['completion_window'] ?? '',
    status: h['status'] as BatchStatus,
    output_file_id: h['output_file_id'] ?? null,
    error_file_id: h['error_file_id'] ?? null,
    created_at: Number(h['created_at']),
    in_progress_at: at('in_progress_at'),
    expires_at: Number(h['expires_at']),
    finalizing_at: at('finalizing_at'),
    completed_at: at('completed_at'),
    failed_at: at('failed_at'),
    expired_at: at('expired_at'),
    cancelling_at: at('cancelling_at'),
    cancelled_at: at('cancelled_at'),
    request_counts: {
      total: Number(h['total']),
      completed: Number(h['completed']),
      failed: Number(h['failed']),
    },
    metadata: h['metadata'] === undefined ? null : (JSON.parse(h['metadata']) as Record<string, string>),
  };
}

/** The batch side of `RedisJobBackend`; it has the same method contracts as `JobBackend`'s. */
export class RedisJobBatches {
  constructor(
    private readonly conn: RedisJobConnection,
    private readonly files: RedisJobFiles,
    private readonly rules: BatchRules,
    private readonly chunk: number,
  ) {}

  /** See `JobBackend.createBatch`. */
  async create(
    owner: string,
    params: CreateBatchParams,
    origin: BatchOrigin = UNKNOWN_ORIGIN,
  ): Promise<BatchObject> {
    const file = await this.files.fields(owner, params.input_file_id);
    const { windowMs, metadata } = checkBatchParams(params, file.kind, this.rules);
    const lines = parseBatchInput(await this.files.uploadText(file.id), this.rules.limits);
    const errors = endpointMismatches(lines, params.endpoint);
    const id = newId('batch_');
    const nowMs = this.conn.clock();
    const nowS = Math.floor(nowMs / 1000);
    const failed = errors.length > 0;
    if (!failed) await this.stage(id, lines);
    const fields = [
      'endpoint',
      params.endpoint,
      'completion_window',
      params.completion_window,
      'created_at',
      String(nowS),
      'expires_at',
      String(Math.floor((nowMs + windowMs) / 1000)),
    ];
    if (failed) fields.push('errors', JSON.stringify(errors), 'failed_at', String(nowS));
    if (metadata !== null) fields.push('metadata', JSON.stringify(metadata));
    // Handed out with every item (CLAIM); a batch stored without them runs as localhost, no headers.
    fields.push('host', origin.host);
    if (origin.headers.length > 0) fields.push('headers', JSON.stringify(origin.headers));
    const verdict = await this.conn.run<string>(COMMIT_BATCH, [
      id,
      owner,
      file.id,
      // A batch refused at validation has no items: its counts stay 0 (completed + failed = total).
      String(failed ? 0 : lines.length),
      failed ? 'failed' : 'validating',
      ...fields,
    ]);
    if (verdict === 'nofile') {
      await this.conn.send(['DEL', this.conn.keys.items(id), this.conn.keys.customIds(id)]);
      throw new JobError(JobErrors.fileNotFound, `no file ${file.id}`, 'file_id');
    }
    if (verdict !== 'ok') throw new Error(`redis job backend: batch ${id} not committed (${verdict})`);
    if (!failed) await this.feed(id, 0);
    return this.get(owner, id);
  }

  /** See `JobBackend.getBatch`. */
  async get(owner: string, id: string): Promise<BatchObject> {
    const h = hashOf(await this.conn.send<unknown>(['HGETALL', this.conn.keys.batch(id)]));
    if (h['owner'] !== owner) throw new JobError(JobErrors.batchNotFound, `no batch ${id}`, 'batch_id');
    return toBatch(h);
  }

  /** See `JobBackend.listBatches`. */
  async list(owner: string, opts: ListOptions = {}): Promise<ListPage<BatchObject>> {
    const limit = pageSize(opts);
    const ids = await pageIds(this.conn, this.conn.keys.batches(owner), opts.after, limit, {
      what: 'batch',
      owner,
      gone: null,
    });
    const rows = await Promise.all(
      ids.map((id) => this.conn.send<unknown>(['HGETALL', this.conn.keys.batch(id)])),
    );
    const batches = rows.map(hashOf).filter((h) => h['owner'] === owner);
    return toPage(batches.map(toBatch), limit);
  }

  /** See `JobBackend.cancelBatch`. */
  async cancel(owner: string, id: string): Promise<BatchObject> {
    const verdict = await this.conn.run<string>(CANCEL, [id, owner]);
    if (verdict === 'missing') throw new JobError(JobErrors.batchNotFound, `no batch ${id}`, 'batch_id');
    if (verdict === 'ok') {
      await this.failUnfinished(id, 'cancel');
      await this.conn.run(END_BATCH, [id, 'cancel']);
    } else if (verdict !== 'cancelling') {
      throw new JobError(JobErrors.cannotCancel, `cannot cancel a batch with status ${verdict}`, 'batch_id');
    }
    return this.get(owner, id);
  }

  /**
   * Appends a committed batch's items to the queue stream from `queued` on, `chunk` per script
   * call. Safe to run twice at once (a creator and a sweep): each step only applies if nobody
   * moved `queued` meanwhile, so no item is queued twice.
   */
  async feed(id: string, queued: number): Promise<void> {
    for (let at = queued; ;) {
      const next = await this.conn.run<number>(FEED, [id, String(at), String(at + this.chunk)]);
      if (next < 0 || next === at) return;
      at = next;
    }
  }

  /**
   * Fails every item without a result of a cancelling (`cancel`: items under a live lease are
   * spared) or expiring (`expire`: all of them) batch, `chunk` items per script call so Redis never
   * stalls on a big batch.
   */
  async failUnfinished(id: string, mode: 'cancel' | 'expire'): Promise<void> {
    const total = Number(await this.conn.send<string | null>(['HGET', this.conn.keys.batch(id), 'total']));
    const failure = mode === 'cancel' ? CANCELLED_ITEM : EXPIRED_ITEM;
    for (let from = 0; from < total; from += this.chunk) {
      const n = await this.conn.run<number>(FAIL_RANGE, [
        id,
        String(from),
        String(from + this.chunk),
        mode,
        failure.code,
        failure.message,
      ]);
      if (n < 0) return;
    }
  }

  /**
   * Writes a batch's requests and custom ids before the commit, under a TTL the commit removes: a
   * creator that dies first leaves nothing behind for good. The TTL is set right after the first
   * write on the same connection, so it is in place before any later write lands.
   */
  private async stage(
    id: string,
    lines: { customId: string; method: string; url: string; body: unknown; raw: string }[],
  ) {
    const items = this.conn.keys.items(id);
    const cids = this.conn.keys.customIds(id);
    const writes: Promise<unknown>[] = [];
    for (let from = 0; from < lines.length; from += this.chunk) {
      const itemArgs = ['HSET', items];
      const cidArgs = ['HSET', cids];
      for (let i = from; i < Math.min(lines.length, from + this.chunk); i++) {
        const l = lines[i]!;
        // The parsed body where earlier versions read it (an instance not yet upgraded sends that),
        // and its source text after it, which this version sends: numbers beyond double precision
        // stay as the client wrote them.
        itemArgs.push(String(i), JSON.stringify([l.method, l.url, l.body, l.raw]));
        cidArgs.push(String(i), l.customId);
      }
      writes.push(this.conn.send(itemArgs), this.conn.send(cidArgs));
      if (from === 0) {
        writes.push(this.conn.send(['PEXPIRE', items, String(STAGING_TTL_MS)]));
        writes.push(this.conn.send(['PEXPIRE', cids, String(STAGING_TTL_MS)]));
      }
    }
    await Promise.all(writes);
  }
}
