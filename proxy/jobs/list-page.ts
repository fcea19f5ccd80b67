/**
 * The cursor pages of the list endpoints (`GET /v1/files`, `GET /v1/batches`), shared by every job
 * backend: how a `limit` is read and how a page is cut from the rows fetched. Pure logic; fetching
 * the rows is the backend's job.
 */

import type { ListOptions } from './job-backend.js';
import { JobError, JobErrors } from './job-errors.js';
import type { ListPage } from './job-types.js';

/**
 * How long a deleted file keeps its place in the listing order, ms (7 days): a list cursor
 * (`after`) naming it goes on with the files after it, as a "delete every file" loop over pages
 * needs (the next page is asked for after the last file of the one just deleted). Later, or for an
 * id that never was the caller's, `after` is refused with `unknownCursor`.
 */
export const DELETED_FILE_CURSOR_TTL_MS = 7 * 86_400_000;

/** The 400 for an `after` that names no file (or batch) of the caller's, now or recently deleted. */
export function unknownCursor(what: 'file' | 'batch', after: string): JobError {
  return new JobError(
    JobErrors.invalidRequest,
    `"after" must be the id of a ${what} in this list (got ${after}): pass last_id of the previous page`,
    'after',
  );
}

/** `limit` of a list call clamped to 1..100, default 20 (also for a limit that is not a number). */
export function pageSize(opts: ListOptions): number {
  const limit = opts.limit !== undefined && Number.isFinite(opts.limit) ? opts.limit : 20;
  return Math.min(100, Math.max(1, Math.floor(limit)));
}

/** A page from up to `limit + 1` objects fetched newest first (one more than shown tells `has_more`). */
export function toPage<T extends { id: string }>(data: T[], limit: number): ListPage<T> {
  const shown = data.slice(0, limit);
  return {
    object: 'list',
    data: shown,
    first_id: shown[0]?.id ?? null,
    last_id: shown.at(-1)?.id ?? null,
    has_more: data.length > limit,
  };
}
