/**
 * The connection of the Redis batch-job backend: one `redis` client, every command bounded by a
 * timeout, and Lua scripts run by SHA with a reload when Redis has lost them. It knows the key
 * prefix and the clock the scripts receive, and nothing about batches.
 */

import { connectWithin } from './connect-within.js';
import { createClient } from 'redis';
import type { Logger } from '../runtime/logger.js';
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
  /** Per-command timeout, ms; a call that runs out rejects (the HTTP layer answers 503). Default 5000. */
  commandTimeoutMs?: number;
  /** How long to wait for the first connection, ms. Default 5000. */
  connectTimeoutMs?: number;
  /** Ceiling of the reconnect backoff (50 ms doubling up to this), ms. Default 2000. */
  reconnectMaxDelayMs?: number;
  /** Receives connection transitions (never keys or contents). */
  logger?: Logger;
}

/** A client that fails calls at once while disconnected and reconnects with capped backoff. */
function newClient(url: string, connectMs: number, maxDelayMs: number) {
  return createClient({
    url,
    // A call while disconnected fails at once (503) instead of waiting for the reconnect.
    disableOfflineQueue: true,
    socket: {
      connectTimeout: connectMs,
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 16), maxDelayMs),
    },
  });
}

type Client = ReturnType<typeof newClient>;

/** `host:port` of a Redis URL, for messages (never the credentials). */
function redisHost(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'redis';
  }
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

/** A connected client plus the key names and clock of one backend. */
export class RedisJobConnection {
  private closed = false;

  constructor(
    private readonly client: Client,
    readonly keys: RedisJobKeys,
    readonly clock: () => number,
    private readonly timeoutMs: number,
  ) {}

  /** One command; rejects after the command timeout or at once while disconnected. */
  send<T>(args: (string | Buffer)[]): Promise<T> {
    return this.client.sendCommand<T>(args, { timeout: this.timeoutMs });
  }

  /**
   * Runs `script` with `ARGV = [prefix, now, group, ...args]` by its SHA, sending the source when
   * Redis does not know it (first use, a restart, SCRIPT FLUSH).
   */
  async run<T>(script: LuaScript, args: (string | Buffer)[]): Promise<T> {
    const argv = [this.keys.prefix, String(this.clock()), JOB_GROUP, ...args];
    try {
      return await this.send<T>(['EVALSHA', script.sha, '0', ...argv]);
    } catch (err) {
      if (!isNoScript(err)) throw err;
      return this.send<T>(['EVAL', script.src, '0', ...argv]);
    }
  }

  /** Waits for replies in flight, then disconnects. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.client.close();
    } catch {
      this.client.destroy();
    }
  }
}

/**
 * Connects to Redis. Rejects when no connection is made within `connectTimeoutMs` (fail fast at
 * startup); afterwards the client reconnects by itself and logs each loss and recovery once.
 */
export async function connectRedisJobs(opts: RedisJobConnectionOptions): Promise<RedisJobConnection> {
  const connectMs = opts.connectTimeoutMs ?? 5000;
  const client = newClient(opts.url, connectMs, opts.reconnectMaxDelayMs ?? 2000);
  let healthy = true;
  client.on('error', (err: unknown) => {
    if (!healthy) return;
    healthy = false;
    opts.logger?.warn(`jobs: redis unavailable (${err instanceof Error ? err.message : String(err)})`);
  });
  client.on('ready', () => {
    if (healthy) return;
    healthy = true;
    opts.logger?.info('jobs: redis available again');
  });
  const connected = await connectWithin(() => client.connect(), connectMs);
  if (!connected) {
    client.destroy();
    throw new Error(`redis job backend: no connection to ${redisHost(opts.url)} within ${connectMs} ms`);
  }
  return new RedisJobConnection(
    client,
    new RedisJobKeys(opts.prefix ?? 'sluice:jobs:'),
    opts.clock ?? Date.now,
    opts.commandTimeoutMs ?? 5000,
  );
}
