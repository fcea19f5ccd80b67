/**
 * The options of one pool's health module (active checks, outlier ejection, slow start, metrics
 * scraping), their defaults, and the resolution of a partial set into a complete, checked one. It
 * holds no state and reads no config file: the config layer maps its YAML onto these types.
 */
import { nowMs } from '../lifecycle/clock.js';

/** Active health checks: a GET to every node on a timer. Present = enabled. */
export interface ActiveCheckOptions {
  /** Path probed on each node. Default `/health`. */
  path?: string;
  /** Time from the end of one probe to the start of the next, ms (plus jitter). Default 5000. */
  intervalMs?: number;
  /** Random extra delay added to each interval, uniform in [0, jitterMs), ms. Default intervalMs / 10. */
  jitterMs?: number;
  /** A probe without a complete response in this time fails, ms. Default 1000. */
  timeoutMs?: number;
  /** Consecutive failed probes that mark a node unavailable. Default 3. */
  unhealthyThreshold?: number;
  /** Consecutive good probes that bring an unavailable node back. Default 2. */
  healthyThreshold?: number;
}

/** Passive outlier ejection from the outcomes of real traffic. Enabled unless `consecutiveFailures` is 0. */
export interface OutlierOptions {
  /** Failures in a row that eject a node; 0 disables ejection. Default 5. */
  consecutiveFailures?: number;
  /** Ejection time of the first ejection, ms; the n-th lasts n × this. Default 10000. */
  baseEjectionMs?: number;
  /** Longest ejection, ms. Default 300000. */
  maxEjectionMs?: number;
  /** Most nodes of the pool that may be ejected at once, percent of the pool. Default 50. */
  maxEjectionPercent?: number;
  /** Healthy time that forgets one past ejection (the multiplier steps down by one), ms. Default 60000. */
  ejectionDecayMs?: number;
}

/** Scraping each node's Prometheus `/metrics` (vLLM names). Present = enabled. */
export interface ScrapeOptions {
  /** Path scraped on each node. Default `/metrics`. */
  path?: string;
  /** Time from the end of one scrape to the start of the next, ms. Default 2000. */
  intervalMs?: number;
  /** A scrape without a complete page in this time fails, ms. Default 1000. */
  timeoutMs?: number;
  /** Saturated while `vllm:num_requests_waiting` >= this; 0 = not used. Default 0. */
  maxWaiting?: number;
  /** Saturated while `vllm:gpu_cache_usage_perc` >= this (0..1]; 0 = not used. Default 0. */
  maxKvUsage?: number;
  /** Largest metrics page read, bytes; a longer page fails the scrape. Default 4 MiB. */
  maxBodyBytes?: number;
}

/** What happened to a node, as reported to `onEvent` and the log. */
export const HealthEventKind = {
  /** Passive ejection started (`reason` names the failures and the duration). */
  ejected: 'ejected',
  /** The node reached the failure threshold but the ejection cap or the last-node rule kept it in. */
  ejectionSkipped: 'ejection-skipped',
  /** The ejection time ended. */
  ejectionEnded: 'ejection-ended',
  /** Active checks failed `unhealthyThreshold` times in a row. */
  checkDown: 'check-down',
  /** Active checks passed `healthyThreshold` times in a row after being down. */
  checkUp: 'check-up',
  /** The node became available again (neither ejected nor failing checks); slow start begins. */
  returned: 'returned',
  /** Slow start finished: the weight factor is back to 1. */
  slowStartDone: 'slow-start-done',
  /** The node's metrics crossed a saturation threshold. */
  saturated: 'saturated',
  /** The node's metrics fell below every threshold, or a scrape failed. */
  unsaturated: 'unsaturated',
} as const;
export type HealthEventKind = (typeof HealthEventKind)[keyof typeof HealthEventKind];

/** One state change of one node in one pool. */
export interface HealthEvent {
  readonly kind: HealthEventKind;
  readonly pool: string;
  /** The node's id (its origin URL). */
  readonly node: string;
  /** Human-readable cause (the last failure, the probe error, the threshold crossed). */
  readonly reason: string;
}

/** Everything `PoolHealth` accepts; every field is optional and defaults as documented. */
export interface PoolHealthOptions {
  /** Absent: no active checks (nodes stay available unless ejected). */
  activeCheck?: ActiveCheckOptions;
  /** Absent: ejection with the defaults. `{ consecutiveFailures: 0 }` disables it. */
  outlier?: OutlierOptions;
  /** Length of the weight ramp of a node that comes back, ms; 0 disables slow start. Default 30000. */
  slowStartMs?: number;
  /** Weight factor at the start of the ramp, (0..1]. Default 0.1. */
  minWeightFactor?: number;
  /** Absent: no scraping (`saturated` stays false, `scraped*` stay -1). */
  scrape?: ScrapeOptions;
  /** Monotonic clock in ms; inject one in tests. Default `nowMs` (performance.now). */
  now?: () => number;
  /** Called synchronously on every state change (for metrics and tests). Default: none. */
  onEvent?: (event: HealthEvent) => void;
}

/** Active-check options with every default applied. */
export type ResolvedActiveCheck = Required<ActiveCheckOptions>;
/** Outlier options with every default applied. */
export type ResolvedOutlier = Required<OutlierOptions>;
/** Scrape options with every default applied. */
export type ResolvedScrape = Required<ScrapeOptions>;

/** `PoolHealthOptions` with every default applied; disabled parts are null. */
export interface ResolvedHealthOptions {
  activeCheck: ResolvedActiveCheck | null;
  outlier: ResolvedOutlier;
  slowStartMs: number;
  minWeightFactor: number;
  scrape: ResolvedScrape | null;
  now: () => number;
  onEvent: ((event: HealthEvent) => void) | null;
}

/** The defaults, for documentation and the admin API. */
export const HEALTH_DEFAULTS = Object.freeze({
  activeCheck: Object.freeze({
    path: '/health',
    intervalMs: 5000,
    timeoutMs: 1000,
    unhealthyThreshold: 3,
    healthyThreshold: 2,
  }),
  outlier: Object.freeze({
    consecutiveFailures: 5,
    baseEjectionMs: 10_000,
    maxEjectionMs: 300_000,
    maxEjectionPercent: 50,
    ejectionDecayMs: 60_000,
  }),
  slowStartMs: 30_000,
  minWeightFactor: 0.1,
  scrape: Object.freeze({
    path: '/metrics',
    intervalMs: 2000,
    timeoutMs: 1000,
    maxWaiting: 0,
    maxKvUsage: 0,
    maxBodyBytes: 4 * 1024 * 1024,
  }),
});

function check(ok: boolean, what: string, value: unknown): void {
  if (!ok) throw new RangeError(`health option ${what} is out of range: ${String(value)}`);
}

function int(what: string, v: number, min: number): number {
  check(Number.isInteger(v) && v >= min, what, v);
  return v;
}

function ms(what: string, v: number, min: number): number {
  check(Number.isFinite(v) && v >= min, what, v);
  return v;
}

function path(what: string, v: string): string {
  check(v.startsWith('/'), what, v);
  return v;
}

function resolveActiveCheck(o: ActiveCheckOptions): ResolvedActiveCheck {
  const d = HEALTH_DEFAULTS.activeCheck;
  const intervalMs = ms('activeCheck.intervalMs', o.intervalMs ?? d.intervalMs, 1);
  return {
    path: path('activeCheck.path', o.path ?? d.path),
    intervalMs,
    jitterMs: ms('activeCheck.jitterMs', o.jitterMs ?? intervalMs / 10, 0),
    timeoutMs: ms('activeCheck.timeoutMs', o.timeoutMs ?? d.timeoutMs, 1),
    unhealthyThreshold: int(
      'activeCheck.unhealthyThreshold',
      o.unhealthyThreshold ?? d.unhealthyThreshold,
      1,
    ),
    healthyThreshold: int('activeCheck.healthyThreshold', o.healthyThreshold ?? d.healthyThreshold, 1),
  };
}

function resolveOutlier(o: OutlierOptions): ResolvedOutlier {
  const d = HEALTH_DEFAULTS.outlier;
  const baseEjectionMs = ms('outlier.baseEjectionMs', o.baseEjectionMs ?? d.baseEjectionMs, 1);
  const maxEjectionMs = ms('outlier.maxEjectionMs', o.maxEjectionMs ?? d.maxEjectionMs, 1);
  check(maxEjectionMs >= baseEjectionMs, 'outlier.maxEjectionMs (below baseEjectionMs)', maxEjectionMs);
  const maxEjectionPercent = o.maxEjectionPercent ?? d.maxEjectionPercent;
  check(
    maxEjectionPercent >= 0 && maxEjectionPercent <= 100,
    'outlier.maxEjectionPercent',
    maxEjectionPercent,
  );
  return {
    consecutiveFailures: int(
      'outlier.consecutiveFailures',
      o.consecutiveFailures ?? d.consecutiveFailures,
      0,
    ),
    baseEjectionMs,
    maxEjectionMs,
    maxEjectionPercent,
    ejectionDecayMs: ms('outlier.ejectionDecayMs', o.ejectionDecayMs ?? d.ejectionDecayMs, 1),
  };
}

function resolveScrape(o: ScrapeOptions): ResolvedScrape {
  const d = HEALTH_DEFAULTS.scrape;
  const maxKvUsage = o.maxKvUsage ?? d.maxKvUsage;
  check(maxKvUsage >= 0 && maxKvUsage <= 1, 'scrape.maxKvUsage', maxKvUsage);
  return {
    path: path('scrape.path', o.path ?? d.path),
    intervalMs: ms('scrape.intervalMs', o.intervalMs ?? d.intervalMs, 1),
    timeoutMs: ms('scrape.timeoutMs', o.timeoutMs ?? d.timeoutMs, 1),
    maxWaiting: int('scrape.maxWaiting', o.maxWaiting ?? d.maxWaiting, 0),
    maxKvUsage,
    maxBodyBytes: int('scrape.maxBodyBytes', o.maxBodyBytes ?? d.maxBodyBytes, 1),
  };
}

/**
 * Applies the defaults to `options` and checks every value. Called by `PoolHealth` on construction
 * and on each `update`; throws `RangeError` naming the option for a value out of range (the config
 * layer validates first, so this is a fail-fast guard at startup and reload).
 */
export function resolveHealthOptions(options: PoolHealthOptions): ResolvedHealthOptions {
  const minWeightFactor = options.minWeightFactor ?? HEALTH_DEFAULTS.minWeightFactor;
  check(minWeightFactor > 0 && minWeightFactor <= 1, 'minWeightFactor', minWeightFactor);
  return {
    activeCheck: options.activeCheck === undefined ? null : resolveActiveCheck(options.activeCheck),
    outlier: resolveOutlier(options.outlier ?? {}),
    slowStartMs: ms('slowStartMs', options.slowStartMs ?? HEALTH_DEFAULTS.slowStartMs, 0),
    minWeightFactor,
    scrape: options.scrape === undefined ? null : resolveScrape(options.scrape),
    now: options.now ?? nowMs,
    onEvent: options.onEvent ?? null,
  };
}
