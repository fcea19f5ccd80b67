/**
 * Ends a batch and renders its output and error files. The files are views over the batch's items
 * (rendered in input order on every read), so a result is stored once, in `job_items`. Callers run
 * these inside their own transaction; nothing here opens one. The ids, the line shape and the
 * failures of cancelled and expired items are shared with the Redis backend.
 */

import { randomBytes } from 'node:crypto';
import type { ItemFailure } from './item-queue.js';
import type { JobDb } from './job-db.js';
import type { BatchStatus, OutputLine } from './job-types.js';

/** The failure of an item its batch's cancel reached before the item ran. */
export const CANCELLED_ITEM: ItemFailure = Object.freeze({
  code: 'batch_cancelled',
  message: 'the batch was cancelled before this request ran',
});

/** The failure of an item unfinished when its batch expired. */
export const EXPIRED_ITEM: ItemFailure = Object.freeze({
  code: 'batch_expired',
  message: 'the batch expired before this request ran',
});

/** Which file of a batch. */
export type BatchFileKind = 'output' | 'error';

interface ItemRow {
  id: number;
  custom_id: string;
  status_code: number | null;
  response: string | null;
  error_code: string | null;
  error_message: string | null;
}

/** Makes an OpenAI-style id: `prefix` + 24 hex digits. */
export function newId(prefix: string): string {
  return prefix + randomBytes(12).toString('hex');
}

/**
 * The output- or error-file line of the finished item `itemId`: `statusCode` null when no HTTP
 * response was obtained, `errorCode` null when the item did not fail without one.
 */
export function outputLine(
  itemId: number,
  customId: string,
  statusCode: number | null,
  body: unknown,
  errorCode: string | null,
  errorMessage: string | null,
): OutputLine {
  return {
    id: `batch_req_${itemId}`,
    custom_id: customId,
    response:
      statusCode === null
        ? null
        : { status_code: statusCode, request_id: `req_${itemId}`, body: body ?? null },
    error: errorCode === null ? null : { code: errorCode, message: errorMessage ?? '' },
  };
}

function lineOf(row: ItemRow): OutputLine {
  const body = row.response === null ? null : (JSON.parse(row.response) as unknown);
  return outputLine(row.id, row.custom_id, row.status_code, body, row.error_code, row.error_message);
}

/**
 * The lines of a batch's output file (items that completed with a 2xx) or error file (every other
 * finished item), in input order, each a JSON text without the newline.
 */
export function* renderBatchFile(db: JobDb, batchId: string, kind: BatchFileKind): IterableIterator<string> {
  const rows = db
    .prepare(
      `SELECT id, custom_id, status_code, response, error_code, error_message FROM job_items
       WHERE batch_id = ? AND outcome = ? ORDER BY idx`,
    )
    .iterate(batchId, kind === 'output' ? 'completed' : 'failed') as IterableIterator<ItemRow>;
  for (const row of rows) yield JSON.stringify(lineOf(row));
}

/** Size of a rendered batch file, bytes (UTF-8, one `\n` after each line). */
function renderedBytes(db: JobDb, batchId: string, kind: BatchFileKind): number {
  let bytes = 0;
  for (const line of renderBatchFile(db, batchId, kind)) bytes += Buffer.byteLength(line) + 1;
  return bytes;
}

/**
 * SQL for the next file's `seq` (listing order): above every file's and every deleted file's kept
 * place (`job_file_tombstones`), so a file made after a delete lists before a cursor naming it.
 */
export const NEXT_FILE_SEQ = `(SELECT MAX(
  COALESCE((SELECT MAX(seq) FROM job_files), 0),
  COALESCE((SELECT MAX(seq) FROM job_file_tombstones), 0)) + 1)`;

/**
 * Moves a batch whose items are all done to its terminal `status` (`completed`, `cancelled` or
 * `expired`): registers an output file when some item completed and an error file when some failed
 * (both owned by the batch's owner), and stamps the matching `*_at` field. `nowS` is seconds since the epoch. Call inside a transaction.
 */
export function finishBatch(
  db: JobDb,
  batchId: string,
  status: Extract<BatchStatus, 'completed' | 'cancelled' | 'expired'>,
  nowS: number,
): void {
  const counts = db.prepare('SELECT owner, completed, failed FROM job_batches WHERE id = ?').get(batchId) as
    { owner: string; completed: number; failed: number } | undefined;
  if (counts === undefined) return;
  const addFile = (kind: BatchFileKind): string => {
    const id = newId('file-');
    db.prepare(
      `INSERT INTO job_files (id, owner, seq, purpose, filename, bytes, created_at, content, batch_id, kind)
       VALUES (?, ?, ${NEXT_FILE_SEQ}, 'batch_output', ?, ?, ?, NULL, ?, ?)`,
    ).run(
      id,
      counts.owner,
      `${batchId}_${kind}.jsonl`,
      renderedBytes(db, batchId, kind),
      nowS,
      batchId,
      kind,
    );
    return id;
  };
  const outputId = counts.completed > 0 ? addFile('output') : null;
  const errorId = counts.failed > 0 ? addFile('error') : null;
  const stamp =
    status === 'completed' ? 'completed_at' : status === 'cancelled' ? 'cancelled_at' : 'expired_at';
  db.prepare(
    `UPDATE job_batches SET status = ?, ${stamp} = ?, output_file_id = ?, error_file_id = ? WHERE id = ?`,
  ).run(status, nowS, outputId, errorId, batchId);
}

/**
 * Marks every unfinished item of a batch failed with `failure` (`CANCELLED_ITEM`, `EXPIRED_ITEM`),
 * counting them in `request_counts.failed`. `leasedToo` also takes items a worker holds right now
 * (their late results are then discarded). `nowMs` is ms since the epoch. Call inside a transaction.
 */
export function failUnfinishedItems(
  db: JobDb,
  batchId: string,
  failure: ItemFailure,
  nowMs: number,
  leasedToo: boolean,
): number {
  const guard = leasedToo
    ? "state != 'done'"
    : "(state = 'pending' OR (state = 'leased' AND (lease_owner IS NULL OR lease_until <= @now)))";
  const { changes } = db
    .prepare(
      `UPDATE job_items SET state = 'done', outcome = 'failed', error_code = @code, error_message = @message,
         finished_at = @now, lease_owner = NULL WHERE batch_id = @batchId AND ${guard}`,
    )
    .run({ batchId, code: failure.code, message: failure.message, now: nowMs });
  if (changes > 0)
    db.prepare('UPDATE job_batches SET failed = failed + ? WHERE id = ?').run(changes, batchId);
  return changes;
}

/** Number of items of a batch not yet done. */
export function unfinishedItems(db: JobDb, batchId: string): number {
  const row = db
    .prepare("SELECT COUNT(*) AS n FROM job_items WHERE batch_id = ? AND state != 'done'")
    .get(batchId) as { n: number };
  return row.n;
}
