/**
 * The per-tenant rate limiter: checks a request against every limit that applies to it (tenant, and
 * tenant × model: requests per minute, tokens per minute, concurrent requests) in one atomic store
 * operation, so a rejected request consumes nothing; pre-debits the token estimate and later
 * reconciles it with the real usage; releases concurrency slots. It does not write responses: the
 * caller turns a decision into a reply with `rateLimitHeaders` and the error catalogue.
 */
import type { SharedTable } from '../runtime/shared-table.js';
import type { Logger } from '../runtime/logger.js';
import { acquireAll, releaseAll, type ConcurrencyLimit } from './concurrency-limit.js';
import {
  compileTenantLimits,
  validateTenantLimits,
  type TenantLimitConfig,
  type TenantLimits,
} from './limit-set.js';
import {
  HOLDS_CONCURRENCY,
  HOLDS_DEBIT,
  HOLDS_RESERVATION,
  RateLimitDecision,
  RateLimitReason,
} from './rate-limit-decision.js';
import { FailMode, TakeStatus, type RateLimitStore } from './rate-limit-store.js';
import { BucketUnit, costIn, msUntil } from './token-bucket.js';

/** The limits configuration (YAML: `rate_limits` and each tenant's `limits`). */
export interface RateLimitConfig {
  /** Limits by tenant name. Tenants not listed get `defaults`. */
  tenants?: Readonly<Record<string, TenantLimitConfig>>;
  /** Limits for every tenant not listed, each with its own buckets. Default none (unlimited). */
  defaults?: TenantLimitConfig | null;
  /** Ceiling of a suggested retry delay, ms. Default 60 000. */
  maxRetryAfterMs?: number;
  /** Retry delay suggested when the concurrency ceiling rejects, ms. Default 1000. */
  concurrencyRetryAfterMs?: number;
  /** Retry delay suggested when the store is unavailable and fails closed, ms. Default 1000. */
  unavailableRetryAfterMs?: number;
}

/** Options of `RateLimiter`. */
export interface RateLimiterOptions extends RateLimitConfig {
  /** Where bucket state lives (`InProcessStore` or `RedisStore`); outlives reloads. */
  store: RateLimitStore;
  logger?: Logger;
  /** The worker threads' shared table, where concurrency counters live; null or absent: one thread. */
  shared?: SharedTable | null;
}

/** Counters for metrics. Monotonic. */
export interface RateLimiterCounters {
  admitted: number;
  /** Admitted without a check: the store was unavailable and fails open. */
  admittedDegraded: number;
  rejectedRequests: number;
  rejectedTokens: number;
  rejectedConcurrency: number;
  rejectedUnavailable: number;
}

/**
 * Checks, reconciles and releases rate limits. One per process: it keeps the concurrency counters
 * and holds the store; `configure` swaps the limits on reload while requests in flight keep the
 * limit sets they were checked against (levels and counters are shared by key).
 *
 * @example
 * const limiter = new RateLimiter({ store: new InProcessStore(), tenants: { acme: { requestsPerMinute: 60 } } });
 * const acme = limiter.forTenant('acme');             // at plan compile time
 * const e = estimateRequestTokens(body);
 * const d = limiter.check(acme, model, e.prompt + e.maxTokens); // per request (sync here)
 * // ... later: limiter.reconcile(d, usageTokens(usage)); limiter.release(d);
 */
export class RateLimiter {
  readonly store: RateLimitStore;
  readonly counters: RateLimiterCounters = {
    admitted: 0,
    admittedDegraded: 0,
    rejectedRequests: 0,
    rejectedTokens: 0,
    rejectedConcurrency: 0,
    rejectedUnavailable: 0,
  };
  /** Requests holding concurrency slots now (gauge; back to 0 when nothing runs). */
  concurrentRequests = 0;
  /**
   * Tokens pre-debited for requests that have not ended (gauge): an estimate is reserved at the
   * check and settled when the request ends (kept, reconciled or refunded). Back to 0 when idle.
   */
  reservedTokens = 0;
  private readonly logger: Logger | null;
  private readonly concurrency = new Map<string, ConcurrencyLimit>();
  private readonly shared: SharedTable | null;
  private config: RateLimitConfig = {};
  private tenants = new Map<string, TenantLimits>();
  private maxRetryAfterMs = 60_000;
  private concurrencyRetryAfterMs = 1000;
  private unavailableRetryAfterMs = 1000;

  constructor(options: RateLimiterOptions) {
    this.store = options.store;
    this.logger = options.logger ?? null;
    this.shared = options.shared ?? null;
    this.configure(options);
  }

  /**
   * Installs a new limits configuration (startup and reload). Validates everything first and
   * throws `RateLimitConfigError` without changing anything when a value is invalid.
   */
  configure(config: RateLimitConfig): void {
    // Validate everything before declaring any bucket, so a bad reload changes nothing.
    for (const [name, limits] of Object.entries(config.tenants ?? {})) validateTenantLimits(name, limits);
    if (config.defaults != null) validateTenantLimits('(defaults)', config.defaults);
    const tenants = new Map<string, TenantLimits>();
    for (const [name, limits] of Object.entries(config.tenants ?? {})) {
      tenants.set(name, compileTenantLimits(name, limits, this.store, this.concurrency, this.shared));
    }
    this.config = config;
    this.tenants = tenants;
    this.maxRetryAfterMs = config.maxRetryAfterMs ?? 60_000;
    this.concurrencyRetryAfterMs = config.concurrencyRetryAfterMs ?? 1000;
    this.unavailableRetryAfterMs = config.unavailableRetryAfterMs ?? 1000;
    this.logger?.info(`ratelimit: limits for ${tenants.size} tenants, ${this.store.kind} store`);
  }

  /**
   * The compiled limits of tenant `name` (its own, else the defaults, else none). Call at plan
   * compile time and keep the result; the request path should not look tenants up by name.
   */
  forTenant(name: string): TenantLimits {
    let t = this.tenants.get(name);
    if (t === undefined) {
      t = compileTenantLimits(name, this.config.defaults ?? null, this.store, this.concurrency, this.shared);
      this.tenants.set(name, t);
    }
    return t;
  }

  /**
   * Checks one request of `tenant` to `model` (null: none) estimated at `tokens` tokens. Admitted:
   * one request and `tokens` are debited from every applicable bucket and a concurrency slot is
   * held. Rejected: nothing is consumed. Returns synchronously with the in-process store, a
   * promise (that never rejects) with Redis.
   */
  check(
    tenant: TenantLimits,
    model: string | null,
    tokens: number,
  ): RateLimitDecision | Promise<RateLimitDecision> {
    // HOT
    const set = tenant.forModel(model);
    // A NaN cost would compare false against every level and slip through.
    const d = new RateLimitDecision(set, tokens >= 0 ? tokens : 0);
    if (set.unlimited) {
      d.allowed = true;
      this.counters.admitted++;
      return d;
    }
    if (set.concurrency.length > 0) {
      const refused = acquireAll(set.concurrency);
      if (refused >= 0) {
        d.reason = RateLimitReason.concurrency;
        d.retryAfterMs = this.bound(this.concurrencyRetryAfterMs);
        this.counters.rejectedConcurrency++;
        return d;
      }
      d.holds = HOLDS_CONCURRENCY;
      this.concurrentRequests++;
    }
    if (set.buckets.length === 0) {
      d.allowed = true;
      this.counters.admitted++;
      return d;
    }
    const status = this.store.take(set.buckets, d.requestedTokens, d.levels);
    if (typeof status === 'number') {
      this.complete(d, status);
      return d;
    }
    return this.completeLater(d, status);
  }

  /**
   * Corrects the token pre-debit of an admitted request with the tokens it really used (from the
   * node's `usage`): refunds the difference, or debits the excess, possibly below zero so the
   * tenant's next requests wait. At most once per decision; a no-op for decisions that debited
   * nothing. Fire and forget: with Redis the correction is sent in the background (failures are
   * counted by the store); `RedisStore.idle()` waits for it.
   */
  reconcile(d: RateLimitDecision, usedTokens: number): void {
    if ((d.holds & HOLDS_DEBIT) === 0 || d.reconciled || !(usedTokens >= 0)) return;
    d.reconciled = true;
    const delta = d.debitedTokens - usedTokens;
    d.debitedTokens = usedTokens;
    if (delta !== 0) background(this.store.adjust(d.set.buckets, 0, delta));
  }

  /**
   * Gives back everything an admitted request took (its request, its debited tokens, its
   * concurrency slot) as if it never ran: for requests turned away after the check (admission
   * control rejected them, the client left before dispatch). Idempotent; fire and forget like
   * `reconcile`.
   */
  refund(d: RateLimitDecision): void {
    this.release(d);
    if ((d.holds & HOLDS_DEBIT) === 0) return;
    d.holds &= ~HOLDS_DEBIT;
    const tokens = d.debitedTokens;
    d.debitedTokens = 0;
    background(this.store.adjust(d.set.buckets, 1, tokens));
  }

  /**
   * Frees the concurrency slot of a finished request and settles its token reservation.
   * Idempotent; call from `onDone`.
   */
  release(d: RateLimitDecision): void {
    // HOT
    if ((d.holds & HOLDS_RESERVATION) !== 0) {
      d.holds &= ~HOLDS_RESERVATION;
      this.reservedTokens -= d.requestedTokens;
    }
    if ((d.holds & HOLDS_CONCURRENCY) === 0) return;
    d.holds &= ~HOLDS_CONCURRENCY;
    this.concurrentRequests--;
    releaseAll(d.set.concurrency);
  }

  private async completeLater(
    d: RateLimitDecision,
    pending: Promise<TakeStatus>,
  ): Promise<RateLimitDecision> {
    let status: TakeStatus;
    try {
      status = await pending;
    } catch {
      status = TakeStatus.unavailable;
    }
    this.complete(d, status);
    return d;
  }

  private complete(d: RateLimitDecision, status: TakeStatus): void {
    // HOT
    if (status === TakeStatus.unavailable) {
      if (this.store.failMode === FailMode.open) {
        d.allowed = true;
        d.degraded = true;
        this.counters.admittedDegraded++;
      } else {
        this.release(d);
        d.reason = RateLimitReason.unavailable;
        d.retryAfterMs = this.bound(this.unavailableRetryAfterMs);
        this.counters.rejectedUnavailable++;
      }
      return;
    }
    this.fillHeaders(d);
    if (status === TakeStatus.ok) {
      d.allowed = true;
      d.holds |= HOLDS_DEBIT | HOLDS_RESERVATION;
      d.debitedTokens = d.requestedTokens;
      this.reservedTokens += d.requestedTokens;
      this.counters.admitted++;
      return;
    }
    this.release(d);
    // The reason is the bucket that keeps the request out longest; a cost above capacity never fits.
    const buckets = d.set.buckets;
    let wait = 0;
    let reason: RateLimitReason = RateLimitReason.requests;
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]!;
      const cost = costIn(b.unit, d.requestedTokens);
      if (cost > b.capacity) d.hard = true;
      const w = msUntil(d.levels[i]!, cost, b.ratePerMs);
      if (w > wait) {
        wait = w;
        reason = b.unit === BucketUnit.tokens ? RateLimitReason.tokens : RateLimitReason.requests;
      }
    }
    if (d.hard) {
      reason = RateLimitReason.tokens;
      wait = this.maxRetryAfterMs;
    }
    d.reason = reason;
    d.retryAfterMs = this.bound(wait);
    if (reason === RateLimitReason.tokens) this.counters.rejectedTokens++;
    else this.counters.rejectedRequests++;
  }

  /** Header values from the most constrained requests bucket and tokens bucket. */
  private fillHeaders(d: RateLimitDecision): void {
    // HOT
    const buckets = d.set.buckets;
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]!;
      const level = d.levels[i]!;
      const remaining = level > 0 ? Math.floor(level + 1e-9) : 0;
      const reset = b.capacity > level ? (b.capacity - level) / b.ratePerMs : 0;
      if (b.unit === BucketUnit.requests) {
        if (d.remainingRequests < 0 || remaining < d.remainingRequests) {
          d.limitRequests = b.capacity;
          d.remainingRequests = remaining;
          d.resetRequestsMs = reset;
        }
      } else if (d.remainingTokens < 0 || remaining < d.remainingTokens) {
        d.limitTokens = b.capacity;
        d.remainingTokens = remaining;
        d.resetTokensMs = reset;
      }
    }
  }

  private bound(ms: number): number {
    const max = this.maxRetryAfterMs;
    return ms < 1 ? 1 : ms > max ? max : Math.ceil(ms);
  }
}

/** Lets a store adjustment finish on its own; stores never reject `adjust`, this is a safety net. */
function background(p: void | Promise<void>): void {
  if (p !== undefined) p.catch(ignore);
}

function ignore(): void {}
