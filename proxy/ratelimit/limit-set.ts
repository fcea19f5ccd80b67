/**
 * Compiled limits: for each tenant, the buckets and concurrency counters that apply to a request,
 * with one `LimitSet` for the tenant alone and one per configured model (the tenant's own limits
 * plus the model's). Built once per configuration; the request path picks a set and never builds one.
 */
import type { SharedTable } from '../runtime/shared-table.js';
import { ConcurrencyLimit } from './concurrency-limit.js';
import type { RateLimitStore } from './rate-limit-store.js';
import { BucketUnit, type Bucket } from './token-bucket.js';

/** Limits of one scope (YAML: `requests_per_minute`, `tokens_per_minute`, `max_concurrent`). */
export interface LimitConfig {
  /** Requests per minute (>= 1), also the burst (bucket capacity). Absent: no limit. */
  requestsPerMinute?: number;
  /** Tokens per minute (>= 1; estimate debited up front, reconciled from usage). Absent: no limit. */
  tokensPerMinute?: number;
  /** Requests in flight at once, per Sluice instance (integer >= 1). Absent: no limit. */
  maxConcurrent?: number;
}

/** A tenant's limits, and per-model limits that apply on top of them. */
export interface TenantLimitConfig extends LimitConfig {
  /** Model name (the body's `model`) → limits for this tenant's requests to that model. */
  models?: Readonly<Record<string, LimitConfig>>;
}

/** Milliseconds in the limits' period. */
const MINUTE_MS = 60_000;

/** The buckets and counters one request is checked against. */
export class LimitSet {
  readonly tenant: string;
  /** The model this set is specific to, or null for the tenant-wide set. */
  readonly model: string | null;
  /** Tenant-scope buckets, then model-scope ones; requests before tokens within a scope. */
  readonly buckets: readonly Bucket[];
  readonly concurrency: readonly ConcurrencyLimit[];
  /** True when nothing limits this set: `check` admits without touching the store. */
  readonly unlimited: boolean;

  constructor(
    tenant: string,
    model: string | null,
    buckets: readonly Bucket[],
    concurrency: readonly ConcurrencyLimit[],
  ) {
    this.tenant = tenant;
    this.model = model;
    this.buckets = buckets;
    this.concurrency = concurrency;
    this.unlimited = buckets.length === 0 && concurrency.length === 0;
  }
}

/** A tenant's compiled limits. Obtain with `RateLimiter.forTenant`; keep it in the plan. */
export class TenantLimits {
  readonly name: string;
  /** The set for requests with no model, or a model without its own limits. */
  readonly base: LimitSet;
  private readonly models: ReadonlyMap<string, LimitSet>;

  constructor(name: string, base: LimitSet, models: ReadonlyMap<string, LimitSet>) {
    this.name = name;
    this.base = base;
    this.models = models;
  }

  /** The set for a request to `model` (null: no model in the body). */
  forModel(model: string | null): LimitSet {
    // HOT
    if (model === null || this.models.size === 0) return this.base;
    return this.models.get(model) ?? this.base;
  }
}

/**
 * Validates and compiles one tenant's limits against `store` (which shares bucket state across compilations of
 * the same key) and `counters` (concurrency counters by key, kept by the limiter across reloads).
 * Keys carry the tenant as a Redis hash tag, `{tenant}`, so one request's keys share a slot.
 */
export function compileTenantLimits(
  name: string,
  config: TenantLimitConfig | null,
  store: RateLimitStore,
  counters: Map<string, ConcurrencyLimit>,
  shared: SharedTable | null = null,
): TenantLimits {
  const scope = `{${name}}`;
  const tenantBuckets: Bucket[] = [];
  const tenantCounters: ConcurrencyLimit[] = [];
  if (config !== null) {
    validateTenantLimits(name, config);
    addScope(scope, config, store, counters, tenantBuckets, tenantCounters, shared);
  }
  const base = new LimitSet(name, null, tenantBuckets.slice(), tenantCounters.slice());
  const models = new Map<string, LimitSet>();
  for (const [model, limits] of Object.entries(config?.models ?? {})) {
    const buckets = tenantBuckets.slice();
    const conc = tenantCounters.slice();
    addScope(`${scope}:model:${model}`, limits, store, counters, buckets, conc, shared);
    models.set(model, new LimitSet(name, model, buckets, conc));
  }
  return new TenantLimits(name, base, models);
}

/** An invalid limit value; the message names the tenant (and model) and the YAML field. */
export class RateLimitConfigError extends Error {
  constructor(scope: string, field: string, message: string) {
    super(`rate limits of ${scope}: ${field} ${message}`);
    this.name = 'RateLimitConfigError';
  }
}

/**
 * Throws `RateLimitConfigError` unless every value of `config` (and of its models) is valid:
 * `requests_per_minute` and `tokens_per_minute` >= 1, `max_concurrent` an integer >= 1. A limit
 * that should not apply is left out (there is no 0 = unlimited, which reads too much like "blocked").
 */
export function validateTenantLimits(tenant: string, config: TenantLimitConfig): void {
  const label = `tenant "${tenant}"`;
  validateScope(label, config);
  for (const [model, limits] of Object.entries(config.models ?? {}))
    validateScope(`${label} model "${model}"`, limits);
}

function validateScope(scope: string, c: LimitConfig): void {
  const fields: [string, number | undefined, boolean][] = [
    ['requests_per_minute', c.requestsPerMinute, false],
    ['tokens_per_minute', c.tokensPerMinute, false],
    ['max_concurrent', c.maxConcurrent, true],
  ];
  for (const [field, v, integer] of fields) {
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 1 || (integer && !Number.isInteger(v))) {
      const what = integer ? 'an integer >= 1' : 'a number >= 1';
      throw new RateLimitConfigError(
        scope,
        field,
        `must be ${what} (leave it out for no limit), got ${String(v)}`,
      );
    }
  }
}

function addScope(
  key: string,
  config: LimitConfig,
  store: RateLimitStore,
  counters: Map<string, ConcurrencyLimit>,
  buckets: Bucket[],
  conc: ConcurrencyLimit[],
  shared: SharedTable | null,
): void {
  const rpm = config.requestsPerMinute ?? 0;
  const tpm = config.tokensPerMinute ?? 0;
  const max = config.maxConcurrent ?? 0;
  if (rpm > 0) buckets.push(store.bucket(`${key}:req`, BucketUnit.requests, rpm, rpm / MINUTE_MS));
  if (tpm > 0) buckets.push(store.bucket(`${key}:tok`, BucketUnit.tokens, tpm, tpm / MINUTE_MS));
  if (max > 0) {
    const counterKey = `${key}:conc`;
    let c = counters.get(counterKey);
    if (c === undefined) {
      // With worker threads, every thread's counter of this key is one shared cell.
      c =
        shared === null
          ? new ConcurrencyLimit(counterKey, max)
          : new ConcurrencyLimit(counterKey, max, shared.record('conc', counterKey));
      counters.set(counterKey, c);
    } else {
      c.limit = max;
    }
    conc.push(c);
  }
}
