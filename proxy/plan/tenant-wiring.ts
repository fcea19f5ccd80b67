/**
 * Compiles the `tenants` and `rate_limits` sections for a plan: the tenant table (keys read from
 * the environment now, so a missing variable rejects the config), and each tenant's limits from
 * the process-wide RateLimiter. Runs before anything with side effects, so a bad section rejects
 * a reload cleanly.
 */
import type { LimitsConfig, SluiceConfig, TenantLimitsConfig } from '../../config/types.js';
import type { LimitConfig, TenantLimitConfig, TenantLimits } from '../ratelimit/limit-set.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';
import { compileTenants, type TenantTable } from '../tenant/tenant-table.js';
import type { Logger } from '../runtime/logger.js';

/** What a plan holds for tenants; null fields mean the feature is off. */
export interface TenantPlan {
  table: TenantTable | null;
  limiter: RateLimiter | null;
  /** Limits by `Tenant.index`. */
  limits: readonly TenantLimits[];
  defaultMaxTokens: number;
}

function limitsOf(c: LimitsConfig): LimitConfig {
  return {
    requestsPerMinute: c.requests_per_minute,
    tokensPerMinute: c.tokens_per_minute,
    maxConcurrent: c.max_concurrent,
  };
}

function tenantLimitsOf(c: TenantLimitsConfig | undefined): TenantLimitConfig | undefined {
  if (c === undefined) return undefined;
  const models =
    c.models === undefined
      ? undefined
      : Object.fromEntries(Object.entries(c.models).map(([m, l]) => [m, limitsOf(l)]));
  return { ...limitsOf(c), models };
}

/** Compiles tenants and limits; throws (TenantConfigError, RateLimitConfigError) on a bad section. */
export function compileTenantPlan(config: SluiceConfig, limiter: () => RateLimiter, log: Logger): TenantPlan {
  const rl = config.rate_limits;
  if (config.tenants === undefined)
    return { table: null, limiter: null, limits: [], defaultMaxTokens: rl.default_max_tokens };
  const table = compileTenants(config.tenants, { anonymous: config.anonymous_tenant ?? null, logger: log });
  const l = limiter();
  const tenants: Record<string, TenantLimitConfig> = {};
  for (const t of config.tenants) {
    const c = tenantLimitsOf(t.limits);
    if (c !== undefined) tenants[t.name] = c;
  }
  l.configure({
    tenants,
    defaults: tenantLimitsOf(rl.defaults) ?? null,
    maxRetryAfterMs: rl.max_retry_after_ms,
  });
  return {
    table,
    limiter: l,
    limits: table.tenants.map((t) => l.forTenant(t.name)),
    defaultMaxTokens: rl.default_max_tokens,
  };
}
