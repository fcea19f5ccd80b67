/**
 * The token bucket every rate limit is made of, and its arithmetic. A bucket holds up to
 * `capacity` units (requests or tokens) and refills continuously at `ratePerMs`; a debit needs the
 * whole cost to be present, and corrections may push the level below zero (so later requests wait
 * for the overdraft to refill). Stores keep the state; this file only defines it and the maths.
 *
 * Burst semantics: a limit of N per minute is a bucket of capacity N refilled at N/60 000 per ms.
 * An idle tenant may therefore send N at once (the burst is the whole minute's allowance), then one
 * every 60 000/N ms; over any window of T ms at most N + N·T/60 000 units are admitted.
 */

/** What a bucket counts. A request costs 1 in a requests bucket and its token estimate in a tokens bucket. */
export const BucketUnit = { requests: 'requests', tokens: 'tokens' } as const;
export type BucketUnit = (typeof BucketUnit)[keyof typeof BucketUnit];

/**
 * One bucket. Declared at compile time through `RateLimitStore.bucket()`; the in-process store keeps
 * its live state in `level` and `updatedMs`, the Redis store keeps it on the server and uses the
 * object only for its key and parameters.
 */
export class Bucket {
  /** Store key, unique per tenant (and model) and unit. */
  readonly key: string;
  readonly unit: BucketUnit;
  /** Maximum level, units (the per-minute amount). */
  capacity: number;
  /** Refill rate, units per ms. */
  ratePerMs: number;
  /** Current level, units; may be negative after a reconciliation debit. In-process store only. */
  level: number;
  /** Clock reading of the last refill, ms. In-process store only. */
  updatedMs: number;

  constructor(key: string, unit: BucketUnit, capacity: number, ratePerMs: number, nowMs: number) {
    this.key = key;
    this.unit = unit;
    this.capacity = capacity;
    this.ratePerMs = ratePerMs;
    this.level = capacity;
    this.updatedMs = nowMs;
  }
}

/**
 * Brings `b` forward to `nowMs`: adds `elapsed × ratePerMs`, capped at capacity. A clock reading
 * earlier than the last one (another writer's clock) adds nothing and keeps the later time.
 */
export function refill(b: Bucket, nowMs: number): void {
  // HOT
  const elapsed = nowMs - b.updatedMs;
  if (elapsed > 0) {
    const level = b.level + elapsed * b.ratePerMs;
    b.level = level > b.capacity ? b.capacity : level;
    b.updatedMs = nowMs;
  } else if (b.level > b.capacity) {
    // The capacity was lowered by a reload.
    b.level = b.capacity;
  }
}

/** Milliseconds until a bucket at `level` holds `cost` units (0 when it already does). */
export function msUntil(level: number, cost: number, ratePerMs: number): number {
  return level >= cost ? 0 : (cost - level) / ratePerMs;
}

/** The cost of one request in a bucket of `unit`: 1 for requests, `tokens` for tokens. */
export function costIn(unit: BucketUnit, tokens: number): number {
  return unit === BucketUnit.requests ? 1 : tokens;
}
