/**
 * Starts and stops everything behind the `batch_api` section: the job backend (SQLite file or
 * Redis), the idempotency store beside it, the local endpoints, and the job worker whose executor
 * sends items through this Sluice. Lives for the process: a reload cannot move the store (the
 * runtime refuses such a reload), the rest is read from the current plan at use.
 */
import { mkdir } from 'node:fs/promises';
import { dirname, isAbsolute, join } from 'node:path';
import type { BatchApiConfig } from '../../config/types.js';
import type { SessionHost } from '../lifecycle/session.js';
import { createIdempotencyStore, type IdempotencyStore } from '../jobs/idempotency-store.js';
import type { JobBackend } from '../jobs/job-backend.js';
import { JobWorker } from '../jobs/job-worker.js';
import { createSqliteJobBackend } from '../jobs/sqlite-job-backend.js';
import type { Plan } from '../plan/plan.js';
import type { Logger } from '../runtime/logger.js';
import type { BatchApiMetrics } from '../metrics/prometheus.js';
import { BatchApi } from './batch-api.js';
import { ProxyItemExecutor } from './job-executor.js';

/** How often the job backlog gauge is refreshed, ms. */
const BACKLOG_EVERY_MS = 2000;
/** How often expired idempotency keys are deleted, ms. */
const PURGE_EVERY_MS = 600_000;

/** What the service needs from the running Sluice. */
export interface BatchServiceContext {
  host: SessionHost;
  /** The plan new requests run on. */
  plan: () => Plan;
  /** The config file, to resolve a relative SQLite path. */
  configPath: string;
  log: Logger;
}

/** `24h` → 86,400,000; `30m` → 1,800,000. */
function windowMs(window: string): number {
  const n = Number(window.slice(0, -1));
  return window.endsWith('h') ? n * 3_600_000 : n * 60_000;
}

/** The admission class of job items on `plan`: configured, else one below the lowest tenant's. */
function jobPriority(plan: Plan): number {
  const configured = plan.config.batch_api?.jobs.priority;
  if (configured !== undefined) return configured;
  let lowest = 0;
  for (const t of plan.config.tenants ?? []) if (t.priority < lowest) lowest = t.priority;
  return lowest - 1;
}

/** The running batch API. */
export class BatchService {
  private constructor(
    readonly api: BatchApi,
    readonly backend: JobBackend,
    readonly idempotency: IdempotencyStore,
    readonly worker: JobWorker,
    readonly executor: ProxyItemExecutor,
    private readonly closeIdempotency: () => Promise<void>,
    private readonly purgeTimer: NodeJS.Timeout,
  ) {
    this.backlogTimer = setInterval(() => this.sampleBacklog(), BACKLOG_EVERY_MS).unref();
    this.sampleBacklog();
  }

  /** Job items not finished in the store, as last sampled (null before the first answer). */
  backlog: number | null = null;
  private readonly backlogTimer: NodeJS.Timeout;

  /** What `/metrics` shows. */
  metrics(): BatchApiMetrics {
    return {
      api: this.api.stats,
      worker: this.worker.stats,
      executor: this.executor.stats,
      backlog: this.backlog,
    };
  }

  private sampleBacklog(): void {
    this.backend.backlog().then(
      (n) => (this.backlog = n),
      () => (this.backlog = null),
    );
  }

  /** Opens the store (the worker starts with `startWorker`). Rejects (after closing what it opened) when the store cannot be opened. */
  static async start(cfg: BatchApiConfig, ctx: BatchServiceContext): Promise<BatchService> {
    const jobs = cfg.jobs;
    const completionWindows = Object.fromEntries(jobs.completion_windows.map((w) => [w, windowMs(w)]));
    const storeOpts = {
      endpoints: cfg.endpoints,
      completionWindows,
      inputLimits: { maxLines: jobs.max_file_lines },
    };
    let backend: JobBackend;
    let idempotency: IdempotencyStore;
    let closeIdempotency = async (): Promise<void> => {};
    /** True while the store is known to be down (its loss and recovery are logged once). */
    let storeDown = (): boolean => false;
    const idemOpts = { ttlMs: cfg.idempotency.ttl_ms, inProgressTtlMs: cfg.idempotency.in_progress_ttl_ms };
    if (jobs.store === 'redis') {
      const r = jobs.redis!;
      // Loaded only when configured: the embedded default never pulls the Redis code in.
      const { createRedisJobBackend } = await import('../jobs/redis-job-backend.js');
      const { createRedisIdempotencyStore } = await import('../jobs/idempotency-store.js');
      const redis = await createRedisJobBackend({
        url: r.url,
        prefix: r.key_prefix,
        logger: ctx.log,
        ...storeOpts,
      });
      backend = redis;
      storeDown = () => !redis.available;
      try {
        const store = await createRedisIdempotencyStore({
          url: r.url,
          prefix: `${r.key_prefix}idem:`,
          ...idemOpts,
        });
        idempotency = store;
        closeIdempotency = () => store.close();
      } catch (err) {
        await backend.close();
        throw err;
      }
    } else {
      const path = isAbsolute(jobs.path) ? jobs.path : join(dirname(ctx.configPath), jobs.path);
      await mkdir(dirname(path), { recursive: true });
      const sqlite = createSqliteJobBackend(path, { durability: jobs.durability, ...storeOpts });
      backend = sqlite;
      idempotency = createIdempotencyStore({ db: sqlite.db, ...idemOpts });
    }
    const api = new BatchApi(backend, idempotency, (err) =>
      ctx.log.error(`batch API: ${err instanceof Error ? err.message : String(err)}`),
    );
    const executor = new ProxyItemExecutor({
      host: ctx.host,
      plan: ctx.plan,
      priorityClass: () => jobPriority(ctx.plan()),
    });
    const worker = new JobWorker(backend, executor, {
      concurrency: jobs.concurrency,
      ratePerSecond: jobs.rate_per_second > 0 ? jobs.rate_per_second : Infinity,
      leaseMs: jobs.lease_ms,
      maxAttempts: jobs.max_attempts,
      retryBaseMs: jobs.retry_base_ms,
      pollMs: jobs.poll_ms,
      // A poll failing while the store is known down is counted (stats.storeErrors), not logged
      // again on every poll.
      onError: (err) => {
        if (!storeDown()) ctx.log.error(`batch jobs: ${err instanceof Error ? err.message : String(err)}`);
      },
    });
    // Expired keys are ignored anyway; this only reclaims their space (Redis expires its own).
    const purgeTimer = setInterval(() => {
      idempotency.purgeExpired().catch((err: unknown) => ctx.log.error(`idempotency purge: ${String(err)}`));
    }, PURGE_EVERY_MS).unref();
    ctx.log.info(`batch API: jobs in ${backend.kind}, ${jobs.concurrency} items at once`);
    return new BatchService(api, backend, idempotency, worker, executor, closeIdempotency, purgeTimer);
  }

  /** Starts executing job items; call once the listeners are bound (a failed start claims nothing). */
  startWorker(): void {
    this.worker.start();
  }

  /** Stops the worker (running items are aborted and handed back at once), then closes the stores. */
  async close(): Promise<void> {
    clearInterval(this.purgeTimer);
    clearInterval(this.backlogTimer);
    await this.worker.stop();
    await this.closeIdempotency();
    await this.backend.close();
  }
}
