/**
 * Cursor pages over the per-owner sorted sets of the Redis batch-job backend (score = creation
 * order): newest first, after a given id. Reads ids only; loading the objects is the caller's job.
 */

import type { RedisJobConnection } from './redis-job-connection.js';

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
