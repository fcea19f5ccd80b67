/**
 * Cursor pages over the per-owner sorted sets of the Redis batch-job backend (score = creation
 * order): newest first, after a given id (or a deleted file's kept place). Reads ids only; loading
 * the objects is the caller's job.
 */

import { unknownCursor } from './list-page.js';
import type { RedisJobConnection } from './redis-job-connection.js';

/** What `after` may name besides a member of the zset. */
export interface CursorScope {
  /** For the error: `file` or `batch`. */
  what: 'file' | 'batch';
  /** The owner whose list this is (a tombstone of another owner's is not theirs). */
  owner: string;
  /** The tombstone key of a deleted member (hash `owner`, `seq`), or null when members are never deleted. */
  gone: ((id: string) => string) | null;
}

/**
 * Up to `limit + 1` ids of the zset `key`, newest first, after the member `after`, or after the
 * place a deleted member had (its tombstone). Throws `JobError` 400 (`param: after`) when `after`
 * is neither (an unknown id, another owner's, or a tombstone gone).
 */
export async function pageIds(
  conn: RedisJobConnection,
  key: string,
  after: string | undefined,
  limit: number,
  scope: CursorScope,
): Promise<string[]> {
  let max = '+inf';
  if (after !== undefined) {
    // RESP3 answers ZSCORE with a number, RESP2 with a string.
    let seq = await conn.send<string | number | null>(['ZSCORE', key, after]);
    if ((seq === null || seq === undefined) && scope.gone !== null) {
      const [owner, goneSeq] = await conn.send<(string | null)[]>([
        'HMGET',
        scope.gone(after),
        'owner',
        'seq',
      ]);
      if (owner === scope.owner && goneSeq !== null && goneSeq !== undefined) seq = goneSeq;
    }
    if (seq === null || seq === undefined) throw unknownCursor(scope.what, after);
    max = `(${seq}`;
  }
  return conn.send<string[]>(['ZRANGE', key, max, '-inf', 'BYSCORE', 'REV', 'LIMIT', '0', String(limit + 1)]);
}
