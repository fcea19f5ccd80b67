/**
 * `Idempotency-Key` bookkeeping for POST endpoints: the first request with a key runs, a retry with
 * the same key and body replays the stored response, the same key with another body or while the
 * first still runs is a conflict (409). Keys expire after a TTL. Three stores behind one async
 * interface: SQLite (the job database file, shared by processes), Redis (shared by Sluice
 * instances; keys expire by Redis TTL) and in-memory. It never writes HTTP.
 */

import { createHash } from 'node:crypto';
import type { JobDb } from './job-db.js';
import { sendWithin } from '../runtime/redis-command.js';

/** A response kept for replay. */
export interface StoredResponse {
  /** HTTP status. */
  status: number;
  /** Headers to replay (content-type and the like; not hop-by-hop ones). */
  headers: Record<string, string>;
  /** The body as sent. */
  body: string;
}

/**
 * What `begin` decided. `new`: run the request, then `complete` (or `abandon`). `replay`: send
 * `response` without running anything. `conflict`: answer 409 with `x-should-retry: false`.
 */
export type IdempotencyBegin =
  | { kind: 'new' }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'conflict'; reason: 'different-body' | 'in-progress' };

/**
 * An idempotency store. Methods are async so a networked store fits; the memory and SQLite stores
 * resolve at once. A rejection is a store failure (Redis down), which callers answer with 503.
 */
export interface IdempotencyStore {
  /** Claims `key` for a request whose method, path and body hash to `requestHash` (see `hashIdempotentRequest`). */
  begin(key: string, requestHash: string): Promise<IdempotencyBegin>;
  /** Stores the response of the request that got `new`; replays start now and last `ttlMs`. No-op if the claim was lost. */
  complete(key: string, response: StoredResponse): Promise<void>;
  /** Releases a claim whose request produced nothing worth replaying (a 5xx, an abort): a retry runs again. */
  abandon(key: string): Promise<void>;
  /** Deletes expired keys; returns how many. Expired keys are ignored anyway, this only reclaims space (Redis: always 0). */
  purgeExpired(): Promise<number>;
}

/** Options of `createIdempotencyStore`. */
export interface IdempotencyOptions {
  /** Database to keep keys in (table `idempotency_keys`); omitted: in memory, this process only. */
  db?: JobDb;
  /** How long a completed key replays, ms. Default 86,400,000 (24 h). */
  ttlMs?: number;
  /** How long a claim without `complete` blocks its key (the process may have died), ms. Default 600,000. */
  inProgressTtlMs?: number;
  /** Wall clock, ms since the epoch. Default `Date.now`. */
  clock?: () => number;
}

/** The fingerprint of a request for `begin`: SHA-256 of method, path and body. */
export function hashIdempotentRequest(method: string, path: string, body: string | Buffer): string {
  return createHash('sha256')
    .update(method)
    .update('\u0000')
    .update(path)
    .update('\u0000')
    .update(body)
    .digest('hex');
}

/**
 * Scopes a client's key so two tenants (or two endpoints) never share one. `credential` (from
 * `idempotencyCredential`) also keeps apart callers the tenant does not tell apart: without
 * tenants, or as the anonymous tenant, a caller authenticated by a route's plugin (auth-jwt) must
 * not be answered with another caller's stored response.
 */
export function scopeIdempotencyKey(
  tenant: string,
  method: string,
  path: string,
  key: string,
  credential?: string,
): string {
  const scope = credential === undefined ? tenant : `${tenant}\u0000cred:${credential}`;
  return `${scope}\u0000${method} ${path}\u0000${key}`;
}

/**
 * A digest of a request's credentials (the `Authorization` and `x-api-key` values, either absent)
 * for `scopeIdempotencyKey`: SHA-256, hex, so the store never holds a credential itself.
 */
export function idempotencyCredential(authorization: string | undefined, apiKey: string | undefined): string {
  return createHash('sha256')
    .update(JSON.stringify([authorization ?? null, apiKey ?? null]))
    .digest('hex');
}

interface Entry {
  requestHash: string;
  state: 'in-progress' | 'done';
  response: StoredResponse | null;
  expiresAt: number; // ms since the epoch
}

function decide(entry: Entry | undefined, requestHash: string, now: number): IdempotencyBegin | null {
  if (entry === undefined || entry.expiresAt <= now) return null;
  if (entry.requestHash !== requestHash) return { kind: 'conflict', reason: 'different-body' };
  if (entry.state === 'in-progress' || entry.response === null)
    return { kind: 'conflict', reason: 'in-progress' };
  return { kind: 'replay', response: entry.response };
}

/**
 * Creates an idempotency store, SQLite-backed when `db` is given.
 *
 * @example
 * const keys = createIdempotencyStore({ db, ttlMs: 3_600_000 });
 * const d = keys.begin(scopeIdempotencyKey(tenant, 'POST', '/v1/batches', key), hashIdempotentRequest('POST', '/v1/batches', body));
 */
export function createIdempotencyStore(opts: IdempotencyOptions = {}): IdempotencyStore {
  const ttlMs = opts.ttlMs ?? 86_400_000;
  const inProgressTtlMs = opts.inProgressTtlMs ?? 600_000;
  const clock = opts.clock ?? Date.now;
  return opts.db === undefined
    ? new MemoryIdempotencyStore(ttlMs, inProgressTtlMs, clock)
    : new SqliteIdempotencyStore(opts.db, ttlMs, inProgressTtlMs, clock);
}

class MemoryIdempotencyStore implements IdempotencyStore {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly ttlMs: number,
    private readonly inProgressTtlMs: number,
    private readonly clock: () => number,
  ) {}

  async begin(key: string, requestHash: string): Promise<IdempotencyBegin> {
    const now = this.clock();
    const decided = decide(this.entries.get(key), requestHash, now);
    if (decided !== null) return decided;
    this.entries.set(key, {
      requestHash,
      state: 'in-progress',
      response: null,
      expiresAt: now + this.inProgressTtlMs,
    });
    return { kind: 'new' };
  }

  async complete(key: string, response: StoredResponse): Promise<void> {
    const entry = this.entries.get(key);
    if (entry?.state !== 'in-progress') return;
    entry.state = 'done';
    entry.response = response;
    entry.expiresAt = this.clock() + this.ttlMs;
  }

  async abandon(key: string): Promise<void> {
    if (this.entries.get(key)?.state === 'in-progress') this.entries.delete(key);
  }

  async purgeExpired(): Promise<number> {
    const now = this.clock();
    let n = 0;
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt <= now) {
        this.entries.delete(key);
        n++;
      }
    }
    return n;
  }
}

interface KeyRow {
  request_hash: string;
  state: 'in-progress' | 'done';
  response: string | null;
  expires_at: number;
}

class SqliteIdempotencyStore implements IdempotencyStore {
  constructor(
    private readonly db: JobDb,
    private readonly ttlMs: number,
    private readonly inProgressTtlMs: number,
    private readonly clock: () => number,
  ) {}

  async begin(key: string, requestHash: string): Promise<IdempotencyBegin> {
    // IMMEDIATE: two processes racing on one key must not both get `new`.
    return this.db
      .transaction((): IdempotencyBegin => {
        const now = this.clock();
        const row = this.db
          .prepare('SELECT request_hash, state, response, expires_at FROM idempotency_keys WHERE key = ?')
          .get(key) as KeyRow | undefined;
        const entry: Entry | undefined =
          row === undefined
            ? undefined
            : {
                requestHash: row.request_hash,
                state: row.state,
                response: row.response === null ? null : (JSON.parse(row.response) as StoredResponse),
                expiresAt: row.expires_at,
              };
        const decided = decide(entry, requestHash, now);
        if (decided !== null) return decided;
        this.db
          .prepare(
            `INSERT INTO idempotency_keys (key, request_hash, state, response, expires_at) VALUES (?, ?, 'in-progress', NULL, ?)
             ON CONFLICT (key) DO UPDATE SET request_hash = excluded.request_hash, state = 'in-progress',
               response = NULL, expires_at = excluded.expires_at`,
          )
          .run(key, requestHash, now + this.inProgressTtlMs);
        return { kind: 'new' };
      })
      .immediate();
  }

  async complete(key: string, response: StoredResponse): Promise<void> {
    this.db
      .prepare(
        "UPDATE idempotency_keys SET state = 'done', response = ?, expires_at = ? WHERE key = ? AND state = 'in-progress'",
      )
      .run(JSON.stringify(response), this.clock() + this.ttlMs, key);
  }

  async abandon(key: string): Promise<void> {
    this.db.prepare("DELETE FROM idempotency_keys WHERE key = ? AND state = 'in-progress'").run(key);
  }

  async purgeExpired(): Promise<number> {
    return this.db.prepare('DELETE FROM idempotency_keys WHERE expires_at <= ?').run(this.clock()).changes;
  }
}

/**
 * The part of a `redis` client the Redis store uses; any connected client of the `redis` package
 * fits.
 */
export interface RedisCommandClient {
  sendCommand<T = unknown>(args: ReadonlyArray<string | Buffer>, options?: { timeout?: number }): Promise<T>;
}

/** Options of `createRedisIdempotencyStore` (one of `client` or `url`). */
export interface RedisIdempotencyOptions {
  /** A connected client to share (the store never closes it). */
  client?: RedisCommandClient;
  /** `redis://[user:pass@]host:port[/db]`: the store opens, and on `close()` closes, its own client. */
  url?: string;
  /** Prefix of every key. Default `sluice:idem:`. */
  prefix?: string;
  /** How long a completed key replays, ms. Default 86,400,000 (24 h). */
  ttlMs?: number;
  /** How long a claim without `complete` blocks its key (the process may have died), ms. Default 600,000. */
  inProgressTtlMs?: number;
  /**
   * Per-command timeout, ms; a call that runs out rejects (the HTTP layer answers 503), though Redis
   * may still run the command later. Default 2000.
   */
  commandTimeoutMs?: number;
  /** How long `createRedisIdempotencyStore` waits for its own client's first connection, ms. Default 5000. */
  connectTimeoutMs?: number;
}

/** A Lua script and the SHA-1 `EVALSHA` knows it by, computed once. */
interface Script {
  src: string;
  sha: string;
}

function script(src: string): Script {
  return { src, sha: createHash('sha1').update(src).digest('hex') };
}

/** ARGV: request hash, in-progress TTL ms. Returns `{'new'}`, `{'replay', response JSON}` or `{'conflict', reason}`. */
const BEGIN_SCRIPT = script(`
local f = redis.call('HMGET', KEYS[1], 'h', 's', 'r')
if f[1] then
  if f[1] ~= ARGV[1] then return { 'conflict', 'different-body' } end
  if f[2] ~= 'done' or not f[3] then return { 'conflict', 'in-progress' } end
  return { 'replay', f[3] }
end
redis.call('HSET', KEYS[1], 'h', ARGV[1], 's', 'in-progress')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return { 'new' }
`);

/** ARGV: response JSON, TTL ms. Completes a claim still in progress. */
const COMPLETE_SCRIPT = script(`
if redis.call('HGET', KEYS[1], 's') ~= 'in-progress' then return 0 end
redis.call('HSET', KEYS[1], 's', 'done', 'r', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`);

/** Releases a claim still in progress. */
const ABANDON_SCRIPT = script(`
if redis.call('HGET', KEYS[1], 's') ~= 'in-progress' then return 0 end
return redis.call('DEL', KEYS[1])
`);

/**
 * Idempotency keys on a Redis server shared by Sluice instances: one hash per key (request hash,
 * state, response) whose Redis TTL is the expiry, each step one Lua script so two instances racing
 * on a key never both get `new`. Expiry follows the Redis server's clock.
 */
export class RedisIdempotencyStore implements IdempotencyStore {
  constructor(
    private readonly client: RedisCommandClient,
    private readonly prefix: string,
    private readonly ttlMs: number,
    private readonly inProgressTtlMs: number,
    private readonly timeoutMs: number,
    private readonly onClose: () => Promise<void>,
  ) {}

  async begin(key: string, requestHash: string): Promise<IdempotencyBegin> {
    const [kind, detail] = await this.run<[string, string?]>(
      BEGIN_SCRIPT,
      key,
      [requestHash, String(this.inProgressTtlMs)],
      // A claim taken after its caller gave up (and answered 503) would block the client's retry
      // with 409 for the in-progress TTL: release it.
      ([late]) => {
        if (late === 'new') this.abandon(key).catch(() => undefined);
      },
    );
    if (kind === 'new') return { kind: 'new' };
    if (kind === 'replay')
      return { kind: 'replay', response: JSON.parse(detail ?? 'null') as StoredResponse };
    return { kind: 'conflict', reason: detail === 'different-body' ? 'different-body' : 'in-progress' };
  }

  async complete(key: string, response: StoredResponse): Promise<void> {
    await this.run(COMPLETE_SCRIPT, key, [JSON.stringify(response), String(this.ttlMs)]);
  }

  async abandon(key: string): Promise<void> {
    await this.run(ABANDON_SCRIPT, key, []);
  }

  /** Redis drops expired keys by itself: nothing to do. */
  async purgeExpired(): Promise<number> {
    return 0;
  }

  /** Closes the client if the store opened it; a shared client stays open. */
  async close(): Promise<void> {
    await this.onClose();
  }

  /** The Redis key of a scoped key: hashed, so any client key gives a short key of one shape. */
  private redisKey(key: string): string {
    return this.prefix + createHash('sha256').update(key).digest('hex');
  }

  /** Runs a script, each command bounded by the timeout; a reply after it goes to `onLate`. */
  private async run<T>(s: Script, key: string, args: string[], onLate?: (reply: T) => void): Promise<T> {
    const tail = ['1', this.redisKey(key), ...args];
    try {
      return await sendWithin(this.client, ['EVALSHA', s.sha, ...tail], this.timeoutMs, onLate);
    } catch (err) {
      // First use, or a restarted Redis: EVAL loads the script into its cache.
      if (!(err instanceof Error && err.message.startsWith('NOSCRIPT'))) throw err;
      return sendWithin(this.client, ['EVAL', s.src, ...tail], this.timeoutMs, onLate);
    }
  }
}

/**
 * Creates a Redis idempotency store over `client`, or over its own connection to `url` (then it
 * rejects when no connection is made within `connectTimeoutMs`). The `redis` package is loaded
 * only here, so processes without Redis never load it.
 *
 * @example
 * const keys = await createRedisIdempotencyStore({ url: 'redis://redis:6379', prefix: 'sluice:jobs:idem:' });
 * const d = await keys.begin(scopeIdempotencyKey(tenant, 'POST', '/v1/batches', key), hash);
 */
export async function createRedisIdempotencyStore(
  opts: RedisIdempotencyOptions,
): Promise<RedisIdempotencyStore> {
  const prefix = opts.prefix ?? 'sluice:idem:';
  const ttlMs = opts.ttlMs ?? 86_400_000;
  const inProgressTtlMs = opts.inProgressTtlMs ?? 600_000;
  const timeoutMs = opts.commandTimeoutMs ?? 2000;
  if (opts.client !== undefined) {
    return new RedisIdempotencyStore(opts.client, prefix, ttlMs, inProgressTtlMs, timeoutMs, async () => {});
  }
  if (opts.url === undefined) throw new Error('createRedisIdempotencyStore needs a client or a url');
  const { closeRedisClient, openRedisClient } = await import('./redis-client.js');
  // Errors surface as rejected calls.
  const client = await openRedisClient({
    url: opts.url,
    connectTimeoutMs: opts.connectTimeoutMs ?? 5000,
    reconnectMaxDelayMs: 2000,
    name: 'redis idempotency store',
  });
  return new RedisIdempotencyStore(client, prefix, ttlMs, inProgressTtlMs, timeoutMs, () =>
    closeRedisClient(client, timeoutMs),
  );
}
