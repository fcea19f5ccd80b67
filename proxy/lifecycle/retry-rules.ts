/**
 * Retry rules: which failures map to which `retries.on` bit, the full-jitter exponential backoff,
 * and the clamped reading of an upstream Retry-After.
 */
import { RetryOn } from '../route/route-table.js';
import { Errors, type ErrorKind } from './errors.js';

/** The RetryOn bit of an upstream status, or 0 when the status is an answer to pass on. */
export function retryBitForStatus(status: number): number {
  // HOT
  if (status >= 500) return RetryOn.status5xx;
  return status === 429 ? RetryOn.status429 : 0;
}

/** The RetryOn bit of a transport failure before the response head, or 0 when never retried. */
export function retryBitForError(kind: ErrorKind): number {
  if (kind === Errors.connectFailed || kind === Errors.connectTimeout) return RetryOn.connectFailure;
  if (kind === Errors.upstreamReset) return RetryOn.reset;
  if (kind === Errors.ttfbTimeout) return RetryOn.timeout;
  return 0;
}

/** Full jitter: a delay drawn uniformly from [0, min(maxMs, baseMs × 2^(retry-1))], ms. */
export function backoffMs(retry: number, baseMs: number, maxMs: number): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** (retry - 1));
  return Math.random() * ceiling;
}

/**
 * A Retry-After header (delta seconds or an HTTP date, RFC 9110 §10.2.3) in ms, at most `capMs`;
 * 0 when absent or unreadable.
 */
export function retryAfterMs(value: string | string[] | undefined, capMs: number): number {
  if (typeof value !== 'string') return 0;
  let ms: number;
  if (/^\d+$/.test(value.trim())) ms = Number(value.trim()) * 1000;
  else {
    const at = Date.parse(value);
    if (Number.isNaN(at)) return 0;
    ms = at - Date.now();
  }
  if (!(ms > 0)) return 0;
  return ms < capMs ? ms : capMs;
}

const STATUS_REASONS: string[] = [];
for (let code = 400; code < 600; code++) STATUS_REASONS[code] = `upstream status ${code}`;

/** A failure reason for an upstream status, for health logs (pre-built: no allocation per call). */
export function statusReason(status: number): string {
  return STATUS_REASONS[status] ?? 'upstream status';
}
