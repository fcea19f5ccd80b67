/**
 * The in-process rate-limit store (the embedded default): buckets live in this process's memory and
 * every operation is synchronous, hence exact: N per minute configured, a burst of 2N admits exactly
 * N. It does not share state with other processes; with worker threads (`server.workers`) the
 * SharedMemoryStore takes its place (see docs/tenants.md).
 */
import { nowMs } from '../lifecycle/clock.js';
import type { RateLimitStore, StoreCounters } from './rate-limit-store.js';
import { FailMode, TakeStatus } from './rate-limit-store.js';
import { Bucket, costIn, refill, type BucketUnit } from './token-bucket.js';

/** Options of `InProcessStore`. */
export interface InProcessStoreOptions {
  /** Monotonic clock, ms. Default `performance.now()`; tests pass a manual clock. */
  clock?: () => number;
}

/** Buckets in a `Map` keyed by bucket key; one object per key, shared across reloads. */
export class InProcessStore implements RateLimitStore {
  readonly kind = 'memory';
  readonly failMode = FailMode.closed;
  readonly counters: StoreCounters = { unavailable: 0, timeouts: 0 };
  private readonly clock: () => number;
  private readonly buckets = new Map<string, Bucket>();

  constructor(options: InProcessStoreOptions = {}) {
    this.clock = options.clock ?? nowMs;
  }

  /** See `RateLimitStore.bucket`. A changed capacity takes effect at the next operation. */
  bucket(key: string, unit: BucketUnit, capacity: number, ratePerMs: number): Bucket {
    const existing = this.buckets.get(key);
    if (existing !== undefined && existing.unit === unit) {
      refill(existing, this.clock());
      existing.capacity = capacity;
      existing.ratePerMs = ratePerMs;
      if (existing.level > capacity) existing.level = capacity;
      return existing;
    }
    const b = new Bucket(key, unit, capacity, ratePerMs, this.clock());
    this.buckets.set(key, b);
    return b;
  }

  /** See `RateLimitStore.take`. Synchronous, so atomic with respect to every other caller. */
  take(buckets: readonly Bucket[], tokens: number, levels: number[]): TakeStatus {
    // HOT
    const now = this.clock();
    let fits = true;
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]!;
      refill(b, now);
      if (b.level < costIn(b.unit, tokens)) fits = false;
    }
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]!;
      if (fits) b.level -= costIn(b.unit, tokens);
      levels[i] = b.level;
    }
    return fits ? TakeStatus.ok : TakeStatus.rejected;
  }

  /** See `RateLimitStore.adjust`. */
  adjust(buckets: readonly Bucket[], requests: number, tokens: number): void {
    const now = this.clock();
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]!;
      refill(b, now);
      const level = b.level + (b.unit === 'requests' ? requests : tokens);
      b.level = level > b.capacity ? b.capacity : level;
    }
  }

  /** Current level of the bucket `key` after a refill (units), or null. For tests and admin views. */
  level(key: string): number | null {
    const b = this.buckets.get(key);
    if (b === undefined) return null;
    refill(b, this.clock());
    return b.level;
  }

  async close(): Promise<void> {
    this.buckets.clear();
  }
}
