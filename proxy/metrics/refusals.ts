/**
 * Why Sluice refused a request before any node answered it: one stable snake_case reason per
 * case, with the HTTP status sent. Counted per reason (and per tenant when known) without lookups:
 * callers pass the index.
 */

/** Index of each reason in the counters. */
export const Refusal = {
  invalidApiKey: 0,
  rateLimitRequests: 1,
  rateLimitTokens: 2,
  rateLimitConcurrency: 3,
  rateLimiterUnavailable: 4,
  admissionQueueFull: 5,
  admissionEvicted: 6,
  admissionQueueTimeout: 7,
  admissionDeadline: 8,
  admissionClosed: 9,
  noHealthyNode: 10,
  routeNotFound: 11,
  badFraming: 12,
  bodyTooLarge: 13,
  headersTooLarge: 14,
  invalidRequest: 15,
  urlTooLong: 16,
  methodNotSupported: 17,
  httpVersion: 18,
  requestTimeout: 19,
} as const;
export type Refusal = (typeof Refusal)[keyof typeof Refusal];

/** Reason label and status of each refusal, by index. */
export const REFUSALS: readonly { readonly reason: string; readonly status: number }[] = [
  { reason: 'invalid_api_key', status: 401 },
  { reason: 'rate_limit_requests', status: 429 },
  { reason: 'rate_limit_tokens', status: 429 },
  { reason: 'rate_limit_concurrency', status: 429 },
  { reason: 'rate_limiter_unavailable', status: 503 },
  { reason: 'admission_queue_full', status: 503 },
  { reason: 'admission_evicted', status: 503 },
  { reason: 'admission_queue_timeout', status: 503 },
  { reason: 'admission_deadline', status: 503 },
  { reason: 'admission_closed', status: 503 },
  { reason: 'no_healthy_node', status: 503 },
  { reason: 'route_not_found', status: 404 },
  { reason: 'bad_framing', status: 400 },
  { reason: 'body_too_large', status: 413 },
  { reason: 'headers_too_large', status: 431 },
  { reason: 'invalid_request', status: 400 },
  { reason: 'url_too_long', status: 414 },
  { reason: 'method_not_supported', status: 501 },
  { reason: 'http_version_not_supported', status: 505 },
  { reason: 'request_timeout', status: 408 },
];
export const REFUSAL_COUNT = REFUSALS.length;

/** The refusal for an admission rejection reason (`queue-full`, `evicted`, ...). */
export function admissionRefusal(reason: string): Refusal {
  switch (reason) {
    case 'queue-full':
      return Refusal.admissionQueueFull;
    case 'evicted':
      return Refusal.admissionEvicted;
    case 'queue-timeout':
      return Refusal.admissionQueueTimeout;
    case 'deadline':
      return Refusal.admissionDeadline;
    default:
      return Refusal.admissionClosed;
  }
}

/** The refusal for a rate-limit decision's reason (`requests`, `tokens`, `concurrency`, `unavailable`). */
export function rateLimitRefusal(reason: string | null | undefined): Refusal {
  switch (reason) {
    case 'tokens':
      return Refusal.rateLimitTokens;
    case 'concurrency':
      return Refusal.rateLimitConcurrency;
    case 'unavailable':
      return Refusal.rateLimiterUnavailable;
    default:
      return Refusal.rateLimitRequests;
  }
}
