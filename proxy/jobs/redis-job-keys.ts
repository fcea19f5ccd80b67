/**
 * The Redis key layout of the batch-job backend, in one place so the TypeScript side and the Lua
 * scripts (which build the same names from the prefix) agree. Names only: nothing here talks to
 * Redis.
 *
 * ```
 * {p}seq                  counter: creation order of files and batches (list order)
 * {p}item-seq             counter: item ids, a block of `total` per batch
 * {p}file:{id}            hash: file fields (+ `content` for uploads, `bytes` once known)
 * {p}files:{owner}        zset seq -> file id, the owner's files
 * {p}file-readers:{id}    set: batches created from an upload
 * {p}file-gone:{id}       hash: owner, seq of a deleted file (its place for list cursors), with a TTL
 * {p}batch:{id}           hash: batch fields, counters, `first_item`, `queued`, `ending`, `host`, `headers`
 * {p}batches:{owner}      zset seq -> batch id, the owner's batches
 * {p}active               zset seq -> batch id, batches not yet terminal
 * {p}items:{batch}        hash index -> JSON [method, url, body]
 * {p}cids:{batch}         hash index -> custom_id
 * {p}results:{batch}      hash index -> JSON result, written once
 * {p}attempts:{batch}     hash index -> claims so far
 * {p}queue                stream of runnable items (fields b, i), consumer group `workers`
 * {p}leases               zset item id -> lease deadline, ms since the epoch
 * {p}inflight             hash item id -> JSON {e: entry id, w: worker, b: batch, i: index}
 * {p}retries              zset "batch index" -> due time, ms since the epoch
 * ```
 */

/** The consumer group every worker reads the queue stream through. */
export const JOB_GROUP = 'workers';

/** Key names under one prefix. */
export class RedisJobKeys {
  constructor(readonly prefix: string) {}

  /** The file hash of `id`. */
  file(id: string): string {
    return `${this.prefix}file:${id}`;
  }

  /** The tombstone of deleted file `id`: its owner and listing place, kept `DELETED_FILE_CURSOR_TTL_MS`. */
  fileGone(id: string): string {
    return `${this.prefix}file-gone:${id}`;
  }

  /** The zset of `owner`'s files by creation order. */
  files(owner: string): string {
    return `${this.prefix}files:${owner}`;
  }

  /** The batch hash of `id`. */
  batch(id: string): string {
    return `${this.prefix}batch:${id}`;
  }

  /** The zset of `owner`'s batches by creation order. */
  batches(owner: string): string {
    return `${this.prefix}batches:${owner}`;
  }

  /** Batches that are not terminal yet. */
  get active(): string {
    return `${this.prefix}active`;
  }

  /** Request of each item of batch `id`. */
  items(id: string): string {
    return `${this.prefix}items:${id}`;
  }

  /** `custom_id` of each item of batch `id`. */
  customIds(id: string): string {
    return `${this.prefix}cids:${id}`;
  }

  /** Result of each finished item of batch `id`. */
  results(id: string): string {
    return `${this.prefix}results:${id}`;
  }

  /** The queue stream. */
  get queue(): string {
    return `${this.prefix}queue`;
  }
}
