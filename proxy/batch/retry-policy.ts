/**
 * Which upstream answers are worth another call and how long to wait before it. Pure functions;
 * the dispatchers own the timers.
 */

/**
 * True for statuses where another call may succeed: 5xx, 429 (rate limited), 408 (timeout).
 * Other 4xx are the item's own fault and final.
 */
export function isRetryableStatus(status: number): boolean {
  return status >= 500 || status === 429 || status === 408;
}

/** Wait before the call following attempt `attempts` (≥ 1): `min(maxMs, baseMs × 2^(attempts−1))`. */
export function backoffMs(attempts: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempts - 1));
}
