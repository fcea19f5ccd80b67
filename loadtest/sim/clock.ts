/**
 * The simulator's monotonic clock. Latency bookkeeping reads this, never `Date.now()`, so wall-clock
 * adjustments cannot bend a measured step; the wall clock is used only for OpenAI `created` stamps.
 */

import { performance } from 'node:perf_hooks';

/** Milliseconds from an arbitrary origin, monotonic, sub-millisecond resolution. */
export function monotonicMs(): number {
  return performance.now();
}
