/**
 * Concurrent-request limits: a counter of requests in flight per tenant (or tenant × model),
 * acquired when a request is admitted and released when it finishes. Counters live in this process
 * (with the Redis store too: each instance enforces its own `max_concurrent`) and survive reloads,
 * so a reload never forgets the requests still running.
 */

/** One in-flight counter with its ceiling. */
export class ConcurrencyLimit {
  /** Counter key (tenant, or tenant and model). */
  readonly key: string;
  /** Ceiling, requests; updated by a reload. */
  limit: number;
  /** Requests holding a slot now. */
  inFlight = 0;

  constructor(key: string, limit: number) {
    this.key = key;
    this.limit = limit;
  }

  /** Takes a slot and returns true, or returns false (and takes nothing) when all are held. */
  tryAcquire(): boolean {
    // HOT
    if (this.inFlight >= this.limit) return false;
    this.inFlight++;
    return true;
  }

  /** Gives a slot back. Releasing more than was acquired is a caller bug and is ignored. */
  release(): void {
    // HOT
    if (this.inFlight > 0) this.inFlight--;
  }
}

/**
 * Acquires every limit in `limits` or none of them. Returns -1 on success, else the index of the
 * limit that refused (the ones before it are released again).
 */
export function acquireAll(limits: readonly ConcurrencyLimit[]): number {
  // HOT
  for (let i = 0; i < limits.length; i++) {
    if (!limits[i]!.tryAcquire()) {
      for (let j = 0; j < i; j++) limits[j]!.release();
      return i;
    }
  }
  return -1;
}

/** Releases every limit in `limits` (after a successful `acquireAll`). */
export function releaseAll(limits: readonly ConcurrencyLimit[]): void {
  // HOT
  for (let i = 0; i < limits.length; i++) limits[i]!.release();
}
