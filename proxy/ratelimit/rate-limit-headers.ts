/**
 * Rate-limit response headers in OpenAI's format, from a `RateLimitDecision`: `x-ratelimit-limit-*`,
 * `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` for requests and tokens on every response
 * where a limit applies, and on rejection `retry-after` (whole seconds, at least 1),
 * `retry-after-ms` and, for a request that can never fit, `x-should-retry: false`. Also the
 * human message of the 429 body. Pure functions; no I/O.
 */
import { RateLimitReason, type RateLimitDecision } from './rate-limit-decision.js';

/**
 * A duration the way OpenAI writes resets (Go's duration format, millisecond precision): `59ms`,
 * `1s`, `8.64s`, `6m0s`, `1h2m3s`; `0s` for zero. Fractions of a millisecond round up.
 */
export function formatResetDuration(ms: number): string {
  const total = Math.ceil(ms);
  if (!(total > 0)) return '0s';
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const millis = total % 60_000;
  const seconds = millis % 1000 === 0 ? String(millis / 1000) : trimZeros((millis / 1000).toFixed(3));
  let out = '';
  if (hours > 0) out += `${hours}h`;
  if (hours > 0 || minutes > 0) out += `${minutes}m`;
  return `${out}${seconds}s`;
}

/**
 * Appends the rate-limit headers of `d` to `out` (flat `[name, value, ...]`) and returns it.
 * Headers of a kind (requests, tokens) appear only when a bucket of that kind applied and its state
 * is known (not for fail-open admissions). Retry headers appear only on rejection.
 *
 * @example
 * rateLimitHeaders(d); // ['x-ratelimit-limit-requests', '60', 'x-ratelimit-remaining-requests', '0',
 * //   'x-ratelimit-reset-requests', '1s', 'retry-after', '1', 'retry-after-ms', '1000']
 */
export function rateLimitHeaders(d: RateLimitDecision, out: string[] = []): string[] {
  // HOT
  if (d.limitRequests >= 0 && d.remainingRequests >= 0) {
    out.push(
      'x-ratelimit-limit-requests',
      String(d.limitRequests),
      'x-ratelimit-remaining-requests',
      String(d.remainingRequests),
      'x-ratelimit-reset-requests',
      formatResetDuration(d.resetRequestsMs),
    );
  }
  if (d.limitTokens >= 0 && d.remainingTokens >= 0) {
    out.push(
      'x-ratelimit-limit-tokens',
      String(d.limitTokens),
      'x-ratelimit-remaining-tokens',
      String(d.remainingTokens),
      'x-ratelimit-reset-tokens',
      formatResetDuration(d.resetTokensMs),
    );
  }
  if (!d.allowed) {
    retryAfterHeaders(d.retryAfterMs, out);
    if (d.hard) out.push('x-should-retry', 'false');
  }
  return out;
}

/**
 * `retry-after` (whole seconds, at least 1) and `retry-after-ms` (at least 1) for a wait of `ms`,
 * appended to `out`: what every 429 and 503 Sluice originates carries.
 */
export function retryAfterHeaders(ms: number, out: string[] = []): string[] {
  const wait = Math.max(1, Math.ceil(ms));
  out.push('retry-after', String(Math.max(1, Math.ceil(wait / 1000))), 'retry-after-ms', String(wait));
  return out;
}

/**
 * The `message` of the error body for a rejected decision, naming the tenant, the limit and the
 * wait (never a key). Empty for an admitted decision.
 */
export function rateLimitMessage(d: RateLimitDecision): string {
  const who =
    d.set.model === null ? `tenant ${d.set.tenant}` : `tenant ${d.set.tenant} on model ${d.set.model}`;
  const wait = formatResetDuration(d.retryAfterMs);
  switch (d.reason) {
    case RateLimitReason.none:
      return '';
    case RateLimitReason.requests:
      return `Rate limit reached for requests per minute (${who}): limit ${d.limitRequests}. Please try again in ${wait}.`;
    case RateLimitReason.tokens:
      return d.hard
        ? `Request too large for tokens per minute (${who}): limit ${d.limitTokens}, requested ${d.requestedTokens}. Reduce the prompt or max_tokens.`
        : `Rate limit reached for tokens per minute (${who}): limit ${d.limitTokens}, remaining ${d.remainingTokens}, requested ${d.requestedTokens}. Please try again in ${wait}.`;
    case RateLimitReason.concurrency:
      return `Too many concurrent requests (${who}). Please try again in ${wait}.`;
    case RateLimitReason.unavailable:
      return 'The rate limiter is temporarily unavailable. Please try again shortly.';
  }
}

function trimZeros(s: string): string {
  return s.replace(/\.?0+$/, '');
}
