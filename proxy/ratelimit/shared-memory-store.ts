/**
 * The rate-limit store of a Sluice with worker threads (`server.workers` above 1, `store: memory`):
 * the in-process store's arithmetic on bucket records in the threads' shared table
 * (runtime/shared-table.ts), each operation under the table's lock, so it stays exact across the
 * threads: N per minute configured, a burst of 2N spread over every thread admits exactly N. The
 * clock is the wall-clock origin plus the monotonic clock, which every thread reads alike.
 */
import type { SharedTable } from '../runtime/shared-table.js';
import type { RateLimitStore, StoreCounters } from './rate-limit-store.js';
import { FailMode, TakeStatus } from './rate-limit-store.js';
import { Bucket, costIn, type BucketUnit } from './token-bucket.js';

/** A bucket whose level and last refill live in the shared table (Float64s `floats[at]`, `[at + 1]`). */
export class SharedBucket extends Bucket {
  readonly floats: Float64Array;
  readonly at: number;

  constructor(
    key: string,
    unit: BucketUnit,
    capacity: number,
    ratePerMs: number,
    now: number,
    floats: Float64Array,
    at: number,
  ) {
    super(key, unit, capacity, ratePerMs, now);
    this.floats = floats;
    this.at = at;
  }
}

/** Milliseconds on a clock every thread of the process shares. */
function sharedNowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Refills `b`'s shared record to `now` (the caller holds the lock); returns its level. */
function refillShared(b: SharedBucket, now: number): number {
  // HOT
  const f = b.floats;
  const at = b.at;
  let level = f[at]!;
  const elapsed = now - f[at + 1]!;
  if (elapsed > 0) {
    level += elapsed * b.ratePerMs;
    f[at + 1] = now;
  }
  if (level > b.capacity) level = b.capacity;
  f[at] = level;
  return level;
}

export class SharedMemoryStore implements RateLimitStore {
  readonly kind = 'memory';
  readonly failMode = FailMode.closed;
  readonly counters: StoreCounters = { unavailable: 0, timeouts: 0 };
  private readonly table: SharedTable;
  private readonly clock: () => number;

  constructor(table: SharedTable, clock: () => number = sharedNowMs) {
    this.table = table;
    this.clock = clock;
  }

  /**
   * See `RateLimitStore.bucket`. The first thread to declare a key fills its bucket; a thread that
   * declares it later (or a reload) keeps the level, lowered to a smaller capacity.
   */
  bucket(key: string, unit: BucketUnit, capacity: number, ratePerMs: number): Bucket {
    const r = this.table.record('bucket', `${unit}\n${key}`);
    const now = this.clock();
    const b = new SharedBucket(key, unit, capacity, ratePerMs, now, r.floats, r.float);
    // A record no thread has filled yet has no refill time (the clock never reads 0): whichever
    // thread takes the lock first fills it, so another thread that found the record claimed but not
    // yet filled never refills it from zero.
    this.table.lock();
    try {
      if (r.floats[r.float + 1] === 0) {
        r.floats[r.float] = capacity;
        r.floats[r.float + 1] = now;
      } else refillShared(b, now);
    } finally {
      this.table.unlock();
    }
    return b;
  }

  /** See `RateLimitStore.take`: atomic across the threads (the table's lock). */
  take(buckets: readonly Bucket[], tokens: number, levels: number[]): TakeStatus {
    // HOT
    const now = this.clock();
    let fits = true;
    this.table.lock();
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i] as SharedBucket;
      if (refillShared(b, now) < costIn(b.unit, tokens)) fits = false;
    }
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i] as SharedBucket;
      const f = b.floats;
      if (fits) f[b.at] = f[b.at]! - costIn(b.unit, tokens);
      levels[i] = f[b.at]!;
    }
    this.table.unlock();
    return fits ? TakeStatus.ok : TakeStatus.rejected;
  }

  /** See `RateLimitStore.adjust`. */
  adjust(buckets: readonly Bucket[], requests: number, tokens: number): void {
    const now = this.clock();
    this.table.lock();
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i] as SharedBucket;
      const level = refillShared(b, now) + (b.unit === 'requests' ? requests : tokens);
      b.floats[b.at] = level > b.capacity ? b.capacity : level;
    }
    this.table.unlock();
  }

  async close(): Promise<void> {
    // The records live as long as the table.
  }
}
