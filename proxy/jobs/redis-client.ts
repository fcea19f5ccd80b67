/**
 * The Redis client of the job stores (batch jobs, idempotency keys): created so a call fails at
 * once while disconnected and the client reconnects with capped backoff, connected within a
 * deadline, and closed. It loads the `redis` package: import it dynamically from code the embedded
 * default also runs.
 */

import { redisPackage } from '../runtime/optional-modules.js';

/** How to open a job-store client. */
export interface RedisClientOptions {
  /** `redis://[user:pass@]host:port[/db]`. */
  url: string;
  /** How long the first connection may take, ms. */
  connectTimeoutMs: number;
  /** Ceiling of the reconnect backoff (50 ms doubling up to this), ms. */
  reconnectMaxDelayMs: number;
  /** Names the store in the error thrown when no connection is made, e.g. `redis job backend`. */
  name: string;
  /** Receives connection errors; without it they are dropped (calls reject on their own). */
  onError?: (err: unknown) => void;
  /** Called each time the client is connected and ready again. */
  onReady?: () => void;
}

function newClient(opts: RedisClientOptions) {
  return redisPackage().createClient({
    url: opts.url,
    // A call while disconnected fails at once (503) instead of waiting for the reconnect.
    disableOfflineQueue: true,
    socket: {
      connectTimeout: opts.connectTimeoutMs,
      reconnectStrategy: (retries: number) =>
        Math.min(50 * 2 ** Math.min(retries, 16), opts.reconnectMaxDelayMs),
    },
  });
}

/** A client opened by `openRedisClient`. */
export type RedisClient = ReturnType<typeof newClient>;

/** `host:port` of a Redis URL, for messages (never the credentials). */
function redisHost(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'redis';
  }
}

/**
 * A connected client. Rejects when no connection is made within `connectTimeoutMs` (fail fast at
 * startup); afterwards the client reconnects by itself.
 */
export async function openRedisClient(opts: RedisClientOptions): Promise<RedisClient> {
  const client = newClient(opts);
  // An 'error' event without a listener would crash the process.
  client.on('error', opts.onError ?? (() => {}));
  if (opts.onReady !== undefined) client.on('ready', opts.onReady);
  let timer: NodeJS.Timeout | undefined;
  const connected = await Promise.race([
    client.connect().then(
      () => true,
      () => false,
    ),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), opts.connectTimeoutMs);
    }),
  ]);
  clearTimeout(timer);
  if (!connected) {
    client.destroy();
    throw new Error(
      `${opts.name}: no connection to ${redisHost(opts.url)} within ${opts.connectTimeoutMs} ms`,
    );
  }
  return client;
}

/**
 * Waits for replies in flight, at most `waitMs` (a frozen Redis never answers them), then
 * disconnects; drops the socket when that fails or the wait runs out.
 */
export async function closeRedisClient(client: RedisClient, waitMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const closed = await Promise.race([
      client.close().then(() => true),
      new Promise<false>((resolve) => {
        timer = setTimeout(() => resolve(false), waitMs);
      }),
    ]);
    if (!closed) client.destroy();
  } catch {
    client.destroy();
  } finally {
    clearTimeout(timer);
  }
}
