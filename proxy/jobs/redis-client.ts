/**
 * The Redis client of the job stores (batch jobs, idempotency keys): created so a call fails at
 * once while disconnected and the client reconnects with capped backoff, connected within a
 * deadline, and closed. It loads the `redis` package: import it dynamically from code the embedded
 * default also runs.
 */

import { redisPackage } from '../runtime/optional-modules.js';
import { isRedisAuthError, redisAuthMessage, redisHost } from '../runtime/redis-credentials.js';

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

/**
 * A connected client. Rejects at once when Redis refuses the credentials (a configuration error),
 * and when no connection is made within `connectTimeoutMs`, naming the last error (fail fast at
 * startup); afterwards the client reconnects by itself.
 */
export async function openRedisClient(opts: RedisClientOptions): Promise<RedisClient> {
  const client = newClient(opts);
  let lastError: unknown = null;
  let refused: (err: Error) => void = () => {};
  const refusal = new Promise<Error>((resolve) => (refused = resolve));
  // An 'error' event without a listener would crash the process.
  client.on('error', (err: unknown) => {
    lastError = err;
    if (isRedisAuthError(err)) refused(err);
    opts.onError?.(err);
  });
  if (opts.onReady !== undefined) client.on('ready', opts.onReady);
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    client.connect().then(
      () => true,
      () => false,
    ),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), opts.connectTimeoutMs);
    }),
    refusal,
  ]);
  clearTimeout(timer);
  if (outcome === true) return client;
  client.destroy();
  const host = redisHost(opts.url);
  if (outcome instanceof Error) throw new Error(redisAuthMessage(opts.name, host, outcome));
  const why = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
  throw new Error(`${opts.name}: no connection to ${host} within ${opts.connectTimeoutMs} ms${why}`);
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
