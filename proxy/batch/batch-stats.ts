/**
 * Counters of one route's micro-batcher, for the metrics endpoint. Plain fields the batcher
 * increments; rendering them is the metrics module's job.
 */

/** Monotonic counters since the batcher was created. */
export class MicroBatcherStats {
  /** Items submitted (including rejected and duplicates). */
  items = 0;
  /** Micro-batches dispatched (windows closed plus idle pass-throughs). */
  batches = 0;
  /** Items dispatched at once because the pool was idle. */
  idlePassThrough = 0;
  /** Items that shared an identical item's result instead of being sent. */
  deduplicated = 0;
  /** Windows closed by reaching the size limit. */
  sizeCloses = 0;
  /** Windows closed by their deadline. */
  timeCloses = 0;
  /** Upstream calls made (combined or single). */
  upstreamCalls = 0;
  /** Combined calls answered 4xx and split into single-item calls. */
  fallbacks = 0;
  /** Retry calls scheduled (per item). */
  retries = 0;
  /** Items rejected because the batcher was closed or full. */
  rejected = 0;
  /** Items that resolved with a non-2xx status. */
  failedItems = 0;
  /** Sinks that threw (a caller bug; the item still counts as resolved). */
  sinkErrors = 0;

  /** Adds `other`'s counters to these (a route's batchers, one per pool, reported as one). */
  add(other: MicroBatcherStats): void {
    this.items += other.items;
    this.batches += other.batches;
    this.idlePassThrough += other.idlePassThrough;
    this.deduplicated += other.deduplicated;
    this.sizeCloses += other.sizeCloses;
    this.timeCloses += other.timeCloses;
    this.upstreamCalls += other.upstreamCalls;
    this.fallbacks += other.fallbacks;
    this.retries += other.retries;
    this.rejected += other.rejected;
    this.failedItems += other.failedItems;
    this.sinkErrors += other.sinkErrors;
  }
}
