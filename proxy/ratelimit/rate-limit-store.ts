/**
 * The interface between the rate limiter and where bucket state lives: in this process
 * (`InProcessStore`, exact, synchronous) or in Redis (`RedisStore`, shared by several instances,
 * asynchronous). A store applies multi-bucket operations atomically; it knows nothing of tenants,
 * models or headers.
 */
import type { Bucket, BucketUnit } from './token-bucket.js';

/** Outcome of `take`. */
export const TakeStatus = {
  /** Every bucket held its cost; all were debited. */
  ok: 0,
  /** At least one bucket lacked its cost; none was debited. */
  rejected: 1,
  /** The store could not be reached in time; nothing is known. The limiter applies `failMode`. */
  unavailable: 2,
} as const;
export type TakeStatus = (typeof TakeStatus)[keyof typeof TakeStatus];

/** What the limiter does when the store is unavailable: admit (open) or reject with 503 (closed). */
export const FailMode = { open: 'open', closed: 'closed' } as const;
export type FailMode = (typeof FailMode)[keyof typeof FailMode];

/** Counters a store keeps for metrics. Monotonic. */
export interface StoreCounters {
  /** Operations that found the store unavailable (offline, timed out, errored). */
  unavailable: number;
  /** Of those, operations abandoned after the per-call timeout. */
  timeouts: number;
}

export interface RateLimitStore {
  /** `memory` or `redis`, for logs and metrics. */
  readonly kind: string;
  /** Behaviour when `take` reports `unavailable`. Always `closed` for stores that cannot fail. */
  readonly failMode: FailMode;
  readonly counters: StoreCounters;

  /**
   * Declares a bucket (compile time, not per request). Declaring an existing key again returns a
   * bucket that shares its state, with the new capacity and rate (a reload keeps the levels).
   */
  bucket(key: string, unit: BucketUnit, capacity: number, ratePerMs: number): Bucket;

  /**
   * Atomically, for all of `buckets`: refill, then debit each one's cost (1 per requests bucket,
   * `tokens` per tokens bucket) if every bucket holds its cost, else debit nothing. Writes each
   * bucket's level after the operation (units, possibly negative) into `levels[i]`.
   * Returns a status synchronously when the store can (in-process), a promise otherwise.
   */
  take(buckets: readonly Bucket[], tokens: number, levels: number[]): TakeStatus | Promise<TakeStatus>;

  /**
   * Atomically adds `requests` to every requests bucket and `tokens` to every tokens bucket after a
   * refill: positive values refund (capped at capacity), negative values debit and may take the
   * level below zero. Never rejects; failures are counted and dropped.
   */
  adjust(buckets: readonly Bucket[], requests: number, tokens: number): void | Promise<void>;

  /** Releases connections and timers. */
  close(): Promise<void>;
}
