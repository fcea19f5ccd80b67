/**
 * The cursor pages of the list endpoints (`GET /v1/files`, `GET /v1/batches`), shared by every job
 * backend: how a `limit` is read and how a page is cut from the rows fetched. Pure logic; fetching
 * the rows is the backend's job.
 */

import type { ListOptions } from './job-backend.js';
import type { ListPage } from './job-types.js';

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
