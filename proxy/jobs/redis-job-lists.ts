/**
 * Cursor pages over the per-owner sorted sets of the Redis batch-job backend (score = creation
 * order): newest first, `limit` 1..100, after a given id. Reads ids only; loading the objects is
 * the caller's job.
 */

import type { ListOptions } from './job-backend.js';
import type { ListPage } from './job-types.js';
import type { RedisJobConnection } from './redis-job-connection.js';

/** `limit` of a list call clamped to 1..100, default 20 (also for a limit that is not a number). */
export function pageSize(opts: ListOptions): number {
  const limit = opts.limit !== undefined && Number.isFinite(opts.limit) ? opts.limit : 20;
  return Math.min(100, Math.max(1, Math.floor(limit)));
}

/**
 * Up to `limit + 1` ids of the zset `key`, newest first, after the member `after`; none when
 * `after` is not a member (an unknown id, or another owner's).
 */
export async function pageIds(
  conn: RedisJobConnection,
  key: string,
  after: string | undefined,
  limit: number,
): Promise<string[]> {
  let max = '+inf';
  if (after !== undefined) {
    // RESP3 answers ZSCORE with a number, RESP2 with a string.
    const seq = await conn.send<string | number | null>(['ZSCORE', key, after]);
    if (seq === null || seq === undefined) return [];
    max = `(${seq}`;
  }
  return conn.send<string[]>(['ZRANGE', key, max, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', String(limit + 1)]);
}

/** A page from up to `limit + 1` objects fetched newest first. */
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
