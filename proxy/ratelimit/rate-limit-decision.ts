/**
 * The result of one rate-limit check: admitted or not and why, when to retry, the values the
 * `x-ratelimit-*` headers report, and what the request holds (a concurrency slot, a token
 * pre-debit) until it is reconciled, refunded or released. One object per request, fixed shape.
 */
import type { LimitSet } from './limit-set.js';

/** Why a check rejected (or `none` when it admitted). */
export const RateLimitReason = {
  none: 'none',
  /** A requests-per-minute bucket was empty. 429, OpenAI type `requests`. */
  requests: 'requests',
  /** A tokens-per-minute bucket lacked the request's estimate. 429, OpenAI type `tokens`. */
  tokens: 'tokens',
  /** The tenant's concurrent-request ceiling was reached. 429, OpenAI type `requests`. */
  concurrency: 'concurrency',
  /** The store was unreachable and fails closed. 503. */
  unavailable: 'unavailable',
} as const;
export type RateLimitReason = (typeof RateLimitReason)[keyof typeof RateLimitReason];

/** Holdings flags. */
export const HOLDS_CONCURRENCY = 1;
export const HOLDS_DEBIT = 2;
/** The pre-debit is still counted in the limiter's `reservedTokens` (until the request ends). */
export const HOLDS_RESERVATION = 4;

export class RateLimitDecision {
  /** The limits checked. */
  readonly set: LimitSet;
  /** Tokens the request was estimated at (prompt + completion budget). */
  readonly requestedTokens: number;
  allowed = false;
  reason: RateLimitReason = RateLimitReason.none;
  /**
   * True when the request can never pass: its token estimate exceeds a tokens bucket's capacity.
   * Sent as `x-should-retry: false`.
   */
  hard = false;
  /** True when admitted unchecked because the store was unavailable and fails open. */
  degraded = false;
  /** Suggested wait before retrying, ms; 0 when admitted, else within [1, maxRetryAfterMs]. */
  retryAfterMs = 0;
  /** Requests-per-minute limit reported in headers; -1 when no requests bucket applies. */
  limitRequests = -1;
  /** Whole requests left in that bucket after this check; -1 when unknown. */
  remainingRequests = -1;
  /** Time until that bucket is full again, ms; -1 when unknown. */
  resetRequestsMs = -1;
  /** Tokens-per-minute limit reported in headers; -1 when no tokens bucket applies. */
  limitTokens = -1;
  /** Whole tokens left after this check; -1 when unknown. */
  remainingTokens = -1;
  /** Time until that bucket is full again, ms; -1 when unknown. */
  resetTokensMs = -1;
  /** Tokens currently debited for this request (the estimate, then the reconciled count). */
  debitedTokens = 0;
  /** HOLDS_* flags: what `release`/`refund` must give back. */
  holds = 0;
  /** True once `reconcile` ran (it runs at most once). */
  reconciled = false;
  /** Bucket levels after the check, units, parallel to `set.buckets`. */
  readonly levels: number[];

  constructor(set: LimitSet, requestedTokens: number) {
    this.set = set;
    this.requestedTokens = requestedTokens;
    this.levels = set.buckets.length === 0 ? EMPTY : new Array<number>(set.buckets.length).fill(0);
  }
}

const EMPTY: number[] = [];
