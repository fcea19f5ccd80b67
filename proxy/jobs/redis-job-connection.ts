/**
 * The connection of the Redis batch-job backend: one `redis` client, every command bounded by a
 * timeout, and Lua scripts run by SHA with a reload when Redis has lost them. It knows the key
 * prefix and the clock the scripts receive, and nothing about batches.
 */

import type { Logger } from '../runtime/logger.js';
import { closeRedisClient, openRedisClient, type RedisClient } from './redis-client.js';
import { RedisCommandTimeout, sendWithin } from '../runtime/redis-command.js';
import type { LuaScript } from './redis-job-lua.js';
import { JOB_GROUP, RedisJobKeys } from './redis-job-keys.js';

/** How to connect (the connection part of `RedisJobBackendOptions`). */
export interface RedisJobConnectionOptions {
  /** `redis://[user:pass@]host:port[/db]`. Required. */
  url: string;
  /** Prefix of every key; one deployment, one prefix. Default `sluice:jobs:`. */
  prefix?: string;
  /** Wall clock, ms since the epoch, handed to every script. Default `Date.now`. */
  clock?: () => number;
  /**
   * Per-command timeout, ms; a call that runs out rejects (the HTTP layer answers 503), though Redis
   * may still run the command later. Default 5000.
   */
  commandTimeoutMs?: number;
  /** How long to wait for the first connection, ms. Default 5000. */
  connectTimeoutMs?: number;
  /** Ceiling of the reconnect backoff (50 ms doubling up to this), ms. Default 2000. */
  reconnectMaxDelayMs?: number;
  /** Receives connection transitions (never keys or contents). */
  logger?: Logger;
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

/**
 * Whether Redis answers, as last seen: lost on a connection error or a command that timed out,
 * back when the client is ready again or a command is answered. Logs each change once, never per
 * call.
 */
export class RedisJobHealth {
  /** False from a loss until the recovery. */
  up = true;

  constructor(private readonly logger: Logger | undefined) {}

  /** Redis failed (`err` says how); logs a warning on the first failure only. */
  lost(err: unknown): void {
    if (!this.up) return;
    this.up = false;
    this.logger?.warn(`jobs: redis unavailable (${err instanceof Error ? err.message : String(err)})`);
  }

  /** Redis answers again; logs on the first answer after a loss only. */
  back(): void {
    if (this.up) return;
    this.up = true;
    this.logger?.info('jobs: redis available again');
  }
}

/** A connected client plus the key names and clock of one backend. */
export class RedisJobConnection {
  private closed = false;
  /** Settles a call's outcome into `health` (class fields: no closure per call). */
  private readonly answered = <T>(reply: T): T => {
    this.health.back();
    return reply;
  };
  private readonly failed = (err: unknown): never => {
    if (err instanceof RedisCommandTimeout) this.health.lost(err);
    throw err;
  };

  constructor(
    private readonly client: RedisClient,
    readonly keys: RedisJobKeys,
    readonly clock: () => number,
    private readonly timeoutMs: number,
    private readonly health: RedisJobHealth,
  ) {}

  /**
   * False while Redis is known to be unavailable (disconnected, or its last command timed out): the
   * loss was logged once, so callers need not log each failed call again.
   */
  get available(): boolean {
    return this.health.up && this.client.isReady;
  }

  /**
   * One command; rejects after the command timeout or at once while disconnected. A command that
   * timed out may still run: its reply, if it comes, goes to `onLate` (see `sendWithin`).
   */
  send<T>(args: (string | Buffer)[], onLate?: (reply: T) => void): Promise<T> {
    return sendWithin(this.client, args, this.timeoutMs, onLate).then(this.answered<T>, this.failed);
  }

  /**
   * Runs `script` with `ARGV = [prefix, now, group, ...args]` by its SHA, sending the source when
   * Redis does not know it (first use, a restart, SCRIPT FLUSH). `onLate` as for `send`.
   */
  async run<T>(script: LuaScript, args: (string | Buffer)[], onLate?: (reply: T) => void): Promise<T> {
    const argv = [this.keys.prefix, String(this.clock()), JOB_GROUP, ...args];
    try {
      return await this.send<T>(['EVALSHA', script.sha, '0', ...argv], onLate);
    } catch (err) {
      if (!isNoScript(err)) throw err;
      return this.send<T>(['EVAL', script.src, '0', ...argv], onLate);
    }
  }

  /** Waits for replies in flight (at most the command timeout), then disconnects. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await closeRedisClient(this.client, this.timeoutMs);
  }
}

/**
 * Connects to Redis. Rejects when no connection is made within `connectTimeoutMs` (fail fast at
 * startup); afterwards the client reconnects by itself and logs each loss and recovery once.
 */
export async function connectRedisJobs(opts: RedisJobConnectionOptions): Promise<RedisJobConnection> {
  const health = new RedisJobHealth(opts.logger);
  const client = await openRedisClient({
    url: opts.url,
    connectTimeoutMs: opts.connectTimeoutMs ?? 5000,
    reconnectMaxDelayMs: opts.reconnectMaxDelayMs ?? 2000,
    name: 'redis job backend',
    onError: (err) => health.lost(err),
    onReady: () => health.back(),
  });
  return new RedisJobConnection(
    client,
    new RedisJobKeys(opts.prefix ?? 'sluice:jobs:'),
    opts.clock ?? Date.now,
    opts.commandTimeoutMs ?? 5000,
    health,
  );
}
