/**
 * The Redis rate-limit store: bucket state on a Redis server shared by several Sluice instances.
 * Operations issued during one event-loop turn are sent as one `EVALSHA` of the bucket script
 * (atomic on the server per operation; the script is loaded on connect and again on `NOSCRIPT`,
 * e.g. after a Redis restart). Every call is bounded by a short timeout; when Redis is
 * offline, slow or failing, the operation reports `unavailable` and the limiter applies the
 * configured fail mode. The client reconnects in the background and limiting resumes by itself.
 *
 * Time: by default the script reads the Redis server's clock (`TIME`), so every instance refills
 * buckets from one clock and clock skew between Sluice hosts cannot create tokens. `time: 'client'`
 * sends the caller's wall clock instead (for tests with a manual clock, or Redis setups where
 * `TIME` is unwanted); then the overshoot bound in docs/tenants.md grows by rate × clock skew.
 */
import type { createClient } from 'redis';
import { RedisCommandTimeout, sendWithin } from '../runtime/redis-command.js';
import { redisPackage } from '../runtime/optional-modules.js';
import { nowMs } from '../lifecycle/clock.js';
import type { Logger } from '../runtime/logger.js';
import { isRedisAuthError, redisAuthMessage, redisHost } from '../runtime/redis-credentials.js';
import { BUCKET_SCRIPT, BucketOp, decodeBatch, encodeBatch } from './redis-bucket-script.js';
import type { RateLimitStore, StoreCounters } from './rate-limit-store.js';
import { FailMode, TakeStatus } from './rate-limit-store.js';
import { Bucket, type BucketUnit } from './token-bucket.js';

/** Options of `RedisStore` (YAML: `rate_limits.redis`). */
export interface RedisStoreOptions {
  /** `redis://[user:pass@]host:port[/db]`. Required. */
  url: string;
  /** Prefix of every key. Default `sluice:rl:`. */
  keyPrefix?: string;
  /** What the limiter does while Redis is unavailable. Default `open` (admit). */
  failMode?: FailMode;
  /** Per-operation timeout, ms, including a script reload. Default 50. */
  timeoutMs?: number;
  /** TCP connect timeout, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** Ceiling of the reconnect backoff (50 ms doubling up to this), ms. Default 1000. */
  reconnectMaxDelayMs?: number;
  /** Whose clock refills buckets: the Redis server's (`server`) or this process's (`client`). Default `server`. */
  time?: 'server' | 'client';
  /** Wall clock for `time: 'client'`, epoch ms. Default `Date.now`. */
  clock?: () => number;
  /** Script calls allowed to wait for Redis at once before further calls count as unavailable. Default 1000. */
  maxPending?: number;
  /** Operations per script call at most (those issued in one event-loop turn share a call). Default 256. */
  maxBatch?: number;
  /** Receives availability transitions (never per request, never keys' contents). */
  logger?: Logger;
}

type Client = ReturnType<typeof createClient>;

/** Redis-backed `RateLimitStore`. Create it once per process; it survives reloads. */
export class RedisStore implements RateLimitStore {
  readonly kind = 'redis';
  readonly failMode: FailMode;
  readonly counters: StoreCounters = { unavailable: 0, timeouts: 0 };
  private readonly client: Client;
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly clientTime: (() => number) | null;
  private readonly logger: Logger | null;
  private readonly connectTimeoutMs: number;
  /** `host:port` of the URL, for messages (never the credentials). */
  private readonly host: string;
  /** The client's last connection error; null until one happens. */
  private lastError: unknown = null;
  /** False after a failure was reported, until the client is ready again (logs transitions only). */
  private healthy = true;
  private closed = false;
  /** The SCRIPT LOAD in progress, if any. */
  private loading: Promise<unknown> | null = null;
  /** Script calls awaiting their reply (`send` never rejects). */
  private readonly sending = new Set<Promise<void>>();
  /** Operations waiting for the next flush. */
  private pending: BucketOp[] = [];
  private flushScheduled = false;
  private readonly flushPending: () => void;
  private readonly maxBatch: number;
  private readonly connecting: Promise<void>;

  constructor(options: RedisStoreOptions) {
    this.failMode = options.failMode ?? FailMode.open;
    this.prefix = options.keyPrefix ?? 'sluice:rl:';
    this.timeoutMs = options.timeoutMs ?? 50;
    this.clientTime = options.time === 'client' ? (options.clock ?? Date.now) : null;
    this.logger = options.logger ?? null;
    this.maxBatch = options.maxBatch ?? 256;
    this.flushPending = () => this.flush();
    const maxDelay = options.reconnectMaxDelayMs ?? 1000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 1000;
    this.host = redisHost(options.url);
    this.client = redisPackage().createClient({
      url: options.url,
      // Commands sent while disconnected fail at once instead of waiting for the reconnect.
      disableOfflineQueue: true,
      commandsQueueMaxLength: options.maxPending ?? 1000,
      socket: {
        connectTimeout: this.connectTimeoutMs,
        reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 16), maxDelay),
      },
    });
    this.client.on('error', (err: unknown) => {
      this.lastError = err;
      this.markUnhealthy(err);
    });
    // Load the script on every (re)connection so the first requests need no NOSCRIPT round trip.
    this.client.on('ready', () => {
      void this.loadScript(nowMs() + this.timeoutMs).catch(() => undefined);
    });
    this.connecting = this.client.connect().then(
      () => undefined,
      (err: unknown) => this.markUnhealthy(err),
    );
  }

  /** Resolves once connected (for startup checks and tests); rejects after `timeoutMs`. */
  async ready(timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.client.isReady) {
      if (this.closed) throw new Error('redis store is closed');
      if (Date.now() > deadline) throw new Error(`redis store not ready within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * Called once at startup: waits for the first connection to be made or to fail (at most the
   * connect timeout), and rejects when Redis refused the credentials, a configuration error no fail
   * mode should hide. Any other failure resolves: the fail mode covers an outage.
   */
  async checkCredentials(): Promise<void> {
    const deadline = Date.now() + this.connectTimeoutMs;
    while (!this.client.isReady && this.lastError === null && !this.closed && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
    if (!this.client.isReady && isRedisAuthError(this.lastError))
      throw new Error(redisAuthMessage('rate_limits.redis', this.host, this.lastError));
  }

  /** True while the client holds a ready connection. */
  get available(): boolean {
    return this.client.isReady;
  }

  /** See `RateLimitStore.bucket`. Stateless here: the state lives under `keyPrefix + key`. */
  bucket(key: string, unit: BucketUnit, capacity: number, ratePerMs: number): Bucket {
    return new Bucket(this.prefix + key, unit, capacity, ratePerMs, 0);
  }

  /**
   * See `RateLimitStore.take`. Operations issued in the same event-loop turn travel in one script
   * call (still atomic per operation, applied in order). Resolves `unavailable` within about
   * `timeoutMs` when Redis is not answering; never rejects.
   */
  take(buckets: readonly Bucket[], tokens: number, levels: number[]): Promise<TakeStatus> {
    // HOT
    if (!this.client.isReady) return Promise.resolve(this.unavailable(null));
    return this.enqueue(true, buckets, 1, tokens, levels);
  }

  /** See `RateLimitStore.adjust`. A failed adjustment is counted and dropped (never rejects). */
  async adjust(buckets: readonly Bucket[], requests: number, tokens: number): Promise<void> {
    if (!this.client.isReady) {
      this.unavailable(null);
      return;
    }
    await this.enqueue(false, buckets, requests, tokens, null);
  }

  /**
   * Resolves once every operation issued so far has been answered or given up on (each within
   * `timeoutMs`): for tests, and for shutdown so that last reconciliations reach Redis.
   */
  async idle(): Promise<void> {
    if (this.pending.length > 0) this.flush();
    await Promise.all(this.sending);
  }

  /** Sends pending operations (waiting at most `timeoutMs` for them), then disconnects. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.idle();
    this.closed = true;
    try {
      this.client.destroy();
    } catch {
      // Already closed by a failed connect.
    }
    await this.connecting;
  }

  private enqueue(
    take: boolean,
    buckets: readonly Bucket[],
    requests: number,
    tokens: number,
    levels: number[] | null,
  ): Promise<TakeStatus> {
    const op = new BucketOp(take, buckets, requests, tokens, levels);
    const done = new Promise<TakeStatus>((resolve) => {
      op.resolve = resolve;
    });
    this.pending.push(op);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flushPending);
    }
    return done;
  }

  /** Sends what accumulated during this event-loop turn, in batches of at most `maxBatch`. */
  private flush(): void {
    this.flushScheduled = false;
    const all = this.pending;
    this.pending = [];
    for (let i = 0; i < all.length; i += this.maxBatch) {
      const sent = this.send(i === 0 && all.length <= this.maxBatch ? all : all.slice(i, i + this.maxBatch));
      this.sending.add(sent);
      void sent.then(() => this.sending.delete(sent));
    }
  }

  private async send(batch: BucketOp[]): Promise<void> {
    const args = encodeBatch(batch, this.clientTime === null ? '' : String(this.clientTime()));
    const deadline = nowMs() + this.timeoutMs;
    try {
      let reply: unknown;
      try {
        reply = await this.call(args, deadline);
      } catch (err) {
        if (!isNoScript(err)) throw err;
        // A restarted (or flushed) Redis has lost its script cache.
        await this.loadScript(deadline);
        reply = await this.call(args, deadline);
      }
      decodeBatch(reply, batch);
    } catch (err) {
      for (const op of batch) op.resolve(this.unavailable(err));
      return;
    }
    if (!this.healthy) {
      this.healthy = true;
      this.logger?.info('ratelimit: redis store available again');
    }
    for (const op of batch) op.resolve(op.status);
  }

  /**
   * Loads the script; concurrent callers (a burst that all met NOSCRIPT) share one SCRIPT LOAD. Every
   * load is bounded by `timeoutMs` from its start, so a caller joining one never waits past its own deadline.
   */
  private loadScript(deadline: number): Promise<unknown> {
    if (this.loading === null) {
      this.loading = this.call(['SCRIPT', 'LOAD', BUCKET_SCRIPT], deadline).finally(() => {
        this.loading = null;
      });
    }
    return this.loading;
  }

  /** One command, abandoned (not cancelled: it may still run on the server) after `deadline`. */
  private call(args: readonly string[], deadline: number): Promise<unknown> {
    const ms = deadline - nowMs();
    if (ms <= 0) return Promise.reject(new RedisCommandTimeout(this.timeoutMs));
    return sendWithin(this.client, args, ms);
  }

  private unavailable(err: unknown): TakeStatus {
    this.counters.unavailable++;
    if (err instanceof RedisCommandTimeout) this.counters.timeouts++;
    this.markUnhealthy(err);
    return TakeStatus.unavailable;
  }

  private markUnhealthy(err: unknown): void {
    if (!this.healthy || this.closed) return;
    this.healthy = false;
    if (isRedisAuthError(err)) {
      // Not an outage that passes: it lasts until the password or the URL is fixed.
      this.logger?.error(`${redisAuthMessage('ratelimit', this.host, err)}; failing ${this.failMode}`);
      return;
    }
    const why = err instanceof Error ? err.message : 'not connected';
    this.logger?.warn(`ratelimit: redis store unavailable (${why}); failing ${this.failMode}`);
  }
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}
