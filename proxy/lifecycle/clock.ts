/** The monotonic clock every measurement uses: milliseconds with sub-millisecond precision. */
import { performance } from 'node:perf_hooks';

/** Milliseconds since an arbitrary origin; never goes backwards. */
export function nowMs(): number {
  return performance.now();
}
