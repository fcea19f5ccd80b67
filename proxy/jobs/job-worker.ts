/**
 * Runs batch items: claims them from a `JobBackend` under a lease, calls an injected executor, and
 * records each result exactly once. Processing is at-least-once (a crash or an expired lease runs
 * an item again) with exactly-once results (the backend's `record` keeps the first). Concurrency
 * and start rate are capped so batch work stays in the background of interactive traffic. It knows
 * nothing about HTTP (the executor does) nor about storage (the backend does).
 */

import { randomBytes } from 'node:crypto';
import { Bucket, BucketUnit, msUntil, refill } from '../ratelimit/token-bucket.js';
import type { JobBackend } from './job-backend.js';
import type { ItemResult, JobItem } from './job-types.js';

/**
 * Executes one item, e.g. by dispatching it through the proxy at the lowest priority class. Resolve
 * with the upstream's status and body (any status: 4xx is a result, not a failure); reject only
 * when no response was obtained. `signal` aborts when the lease is about to run out or the worker
 * stops.
 */
export interface ItemExecutor {
  execute(item: JobItem, signal: AbortSignal): Promise<ItemResult>;
}

/** Options of a `JobWorker`. */
export interface JobWorkerOptions {
  /** Most items executing at once in this worker. Default 4. */
  concurrency?: number;
  /** Most item starts per second (token bucket, burst = concurrency). Default unlimited. */
  ratePerSecond?: number;
  /** Lease on a claimed item, ms; must exceed the longest execution (the executor is aborted at 90%). Default 300,000. */
  leaseMs?: number;
  /** How often an idle worker looks for work and sweeps batches forward, ms. Default 500. */
  pollMs?: number;
  /** Claims of one item before it fails for good (a 429/5xx answer, a rejection, a crash). Default 3. */
  maxAttempts?: number;
  /** Backoff before a retry, ms, doubled per attempt. Default 1000. */
  retryBaseMs?: number;
  /** Lease owner name; unique per worker. Default random. */
  workerId?: string;
  /** Clock of the start-rate bucket and the sweep tick, ms. Default `Date.now`. Leases use the backend's own clock. */
  clock?: () => number;
  /** Called with errors the worker survives (a backend call that failed; the lease will expire and the item run again). */
  onError?: (err: unknown) => void;
}

/** Counters of one worker since it started. */
export interface JobWorkerStats {
  /** Executions started. */
  started: number;
  /** Results written. */
  recorded: number;
  /** Results discarded because the item already had one. */
  duplicates: number;
  /** Attempts given back for a retry. */
  retried: number;
  /** Backend calls that failed (a claim, a sweep, a result); each is tried again or recovered by lease expiry. */
  storeErrors: number;
}

/** A 429 or 5xx may succeed later; anything else is the item's result. */
function retryable(status: number): boolean {
  return status === 429 || status >= 500;
}

/**
 * A worker over one job backend. `start()` it once; `stop()` stops claiming, aborts running
 * executions and waits for them to settle. Any number of workers, in one process or many, may share
 * a backend.
 *
 * @example
 * const worker = new JobWorker(createSqliteJobBackend(path), executor, { concurrency: 8, ratePerSecond: 200 });
 * worker.start();
 * await worker.whenIdle();
 */
export class JobWorker {
  readonly stats: JobWorkerStats = { started: 0, recorded: 0, duplicates: 0, retried: 0, storeErrors: 0 };
  private readonly concurrency: number;
  /** Item starts, capacity `concurrency`; null when the start rate is unlimited. */
  private readonly starts: Bucket | null;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly maxAttempts: number;
  private readonly retryBaseMs: number;
  private readonly workerId: string;
  private readonly clock: () => number;
  private readonly onError: (err: unknown) => void;
  private readonly stopper = new AbortController();
  private readonly running = new Set<Promise<void>>();
  /** The executions running, each with what aborts it when its batch is cancelled. */
  private readonly held = new Map<JobItem, AbortController>();
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private woken = false; // a wake-up came while the loop was not sleeping
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly backend: JobBackend,
    private readonly executor: ItemExecutor,
    opts: JobWorkerOptions = {},
  ) {
    this.clock = opts.clock ?? Date.now;
    this.concurrency = Math.max(1, opts.concurrency ?? 4);
    const rate = opts.ratePerSecond ?? Infinity; // items/s
    this.starts = Number.isFinite(rate)
      ? new Bucket('job-starts', BucketUnit.requests, this.concurrency, rate / 1000, this.clock())
      : null;
    this.leaseMs = opts.leaseMs ?? 300_000;
    this.pollMs = opts.pollMs ?? 500;
    this.maxAttempts = Math.max(1, opts.maxAttempts ?? 3);
    this.retryBaseMs = opts.retryBaseMs ?? 1000;
    this.workerId = opts.workerId ?? `worker-${randomBytes(6).toString('hex')}`;
    this.onError = opts.onError ?? (() => {});
  }

  /** Starts claiming and executing items. Calling it twice is a no-op. */
  start(): void {
    this.loop ??= this.run().catch((err: unknown) => this.onError(err));
  }

  /** Stops claiming, aborts running executions and waits for them to settle. Unfinished items run again elsewhere once their lease expires. */
  async stop(): Promise<void> {
    this.stopper.abort();
    this.notify();
    await this.loop;
    await Promise.allSettled(this.running);
  }

  /** Resolves the next time this worker finds no batch with work left and nothing running. */
  whenIdle(): Promise<void> {
    return new Promise((resolve) => {
      this.idleWaiters.push(resolve);
      this.notify();
    });
  }

  private async run(): Promise<void> {
    let sweptAt = -Infinity;
    while (!this.stopper.signal.aborted) {
      const now = this.clock();
      if (now - sweptAt >= this.pollMs) {
        sweptAt = now;
        await this.guard(() => this.backend.sweep(this.maxAttempts));
        await this.guard(() => this.abortCancelled());
      }
      const want = Math.min(this.concurrency - this.running.size, this.availableTokens());
      const items =
        want > 0
          ? ((await this.guard(() => this.backend.claim(this.workerId, want, this.leaseMs))) ?? [])
          : [];
      if (this.stopper.signal.aborted) {
        // Stopped during the claim: hand the items straight back rather than run them.
        for (const item of items) await this.guard(() => this.backend.retryLater(item, this.workerId, 0));
        break;
      }
      for (const item of items) this.launch(item);
      if (items.length === 0 && this.running.size === 0 && this.idleWaiters.length > 0) {
        if ((await this.guard(() => this.backend.hasWork())) === false) {
          for (const resolve of this.idleWaiters.splice(0)) resolve();
        }
      }
      // Wait for a slot, a rate token or the poll tick, whichever comes first.
      let waitMs = this.pollMs;
      if (items.length > 0 && this.running.size < this.concurrency) waitMs = 0;
      if (this.starts !== null && this.starts.level < 1)
        waitMs = Math.min(waitMs, Math.ceil(msUntil(this.starts.level, 1, this.starts.ratePerMs)));
      await this.sleep(waitMs);
    }
  }

  private launch(item: JobItem): void {
    if (this.starts !== null) this.starts.level -= 1;
    this.stats.started++;
    const p = this.execute(item).finally(() => {
      this.running.delete(p);
      this.notify();
    });
    this.running.add(p);
  }

  private async execute(item: JobItem): Promise<void> {
    const cancel = new AbortController();
    this.held.set(item, cancel);
    const signal = AbortSignal.any([
      this.stopper.signal,
      cancel.signal,
      AbortSignal.timeout(Math.floor(this.leaseMs * 0.9)),
    ]);
    let result: ItemResult | null = null;
    let failure = '';
    try {
      result = await this.executor.execute(item, signal);
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
    } finally {
      this.held.delete(item);
    }
    if ((this.stopper.signal.aborted || cancel.signal.aborted) && result === null) {
      // Stopped (a drain or a restart), or its batch was cancelled: hand the item back now rather
      // than after its lease (the sweep then cancels it, or another worker runs it at once).
      await this.guard(() => this.backend.retryLater(item, this.workerId, 0));
      return;
    }
    const again = result === null || retryable(result.status);
    if (again && item.attempts < this.maxAttempts) {
      const delay = this.retryBaseMs * 2 ** (item.attempts - 1);
      if ((await this.guard(() => this.backend.retryLater(item, this.workerId, delay))) === true)
        this.stats.retried++;
      return;
    }
    const outcome = await this.guard(() =>
      result === null
        ? this.backend.fail(item, { code: 'request_failed', message: failure })
        : this.backend.record(item, result),
    );
    if (outcome === 'duplicate') this.stats.duplicates++;
    else if (outcome !== undefined) this.stats.recorded++;
    if (outcome === 'last') await this.guard(() => this.backend.finalize(item.batchId));
  }

  /**
   * Aborts the executions whose batch was cancelled meanwhile (one look-up per batch held): an item
   * waiting out a tenant's rate limit, or running at a node, stops instead of running on for a
   * batch nobody wants, using the tenant's quota (a cancelled batch stayed `cancelling` until all
   * its held items had run).
   */
  private async abortCancelled(): Promise<void> {
    const byBatch = new Map<string, JobItem[]>();
    for (const item of this.held.keys()) {
      const list = byBatch.get(item.batchId);
      if (list === undefined) byBatch.set(item.batchId, [item]);
      else list.push(item);
    }
    await Promise.all(
      [...byBatch].map(async ([batchId, items]) => {
        // One batch that cannot be read (a backend blip) does not keep the others unchecked.
        const status = await this.guard(
          async () => (await this.backend.getBatch(items[0]!.owner, batchId)).status,
        );
        if (status !== 'cancelling' && status !== 'cancelled') return;
        for (const item of items) this.held.get(item)?.abort(new Error(`batch ${batchId} was cancelled`));
      }),
    );
  }

  private availableTokens(): number {
    if (this.starts === null) return this.concurrency;
    refill(this.starts, this.clock());
    return Math.floor(this.starts.level);
  }

  /** Runs a backend step; a failure is reported and yields undefined (the lease expiry is the recovery). */
  private async guard<T>(step: () => Promise<T>): Promise<T | undefined> {
    try {
      return await step();
    } catch (err) {
      this.stats.storeErrors++;
      this.onError(err);
      return undefined;
    }
  }

  /** Ends the loop's current sleep, or the next one at once when the loop is busy in a backend call. */
  private notify(): void {
    if (this.wake !== null) this.wake();
    else this.woken = true;
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopper.signal.aborted) return Promise.resolve();
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }
}
