/**
 * `Idempotency-Key` bookkeeping for POST endpoints: the first request with a key runs, a retry with
 * the same key and body replays the stored response, the same key with another body or while the
 * first still runs is a conflict (409). Keys expire after a TTL. Two stores behind one interface:
 * SQLite (the job database file, shared by processes) and in-memory. It never writes HTTP.
 */

import { createHash } from 'node:crypto';
import type { JobDb } from './job-db.js';

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

/** An idempotency store. Methods are synchronous: both implementations answer without I/O waits. */
export interface IdempotencyStore {
  /** Claims `key` for a request whose method, path and body hash to `requestHash` (see `hashIdempotentRequest`). */
  begin(key: string, requestHash: string): IdempotencyBegin;
  /** Stores the response of the request that got `new`; replays start now and last `ttlMs`. No-op if the claim was lost. */
  complete(key: string, response: StoredResponse): void;
  /** Releases a claim whose request produced nothing worth replaying (a 5xx, an abort): a retry runs again. */
  abandon(key: string): void;
  /** Deletes expired keys; returns how many. Expired keys are ignored anyway, this only reclaims space. */
  purgeExpired(): number;
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

/** Scopes a client's key so two tenants (or two endpoints) never share one. */
export function scopeIdempotencyKey(tenant: string, method: string, path: string, key: string): string {
  return `${tenant}\u0000${method} ${path}\u0000${key}`;
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

  begin(key: string, requestHash: string): IdempotencyBegin {
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

  complete(key: string, response: StoredResponse): void {
    const entry = this.entries.get(key);
    if (entry?.state !== 'in-progress') return;
    entry.state = 'done';
    entry.response = response;
    entry.expiresAt = this.clock() + this.ttlMs;
  }

  abandon(key: string): void {
    if (this.entries.get(key)?.state === 'in-progress') this.entries.delete(key);
  }

  purgeExpired(): number {
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

  begin(key: string, requestHash: string): IdempotencyBegin {
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

  complete(key: string, response: StoredResponse): void {
    this.db
      .prepare(
        "UPDATE idempotency_keys SET state = 'done', response = ?, expires_at = ? WHERE key = ? AND state = 'in-progress'",
      )
      .run(JSON.stringify(response), this.clock() + this.ttlMs, key);
  }

  abandon(key: string): void {
    this.db.prepare("DELETE FROM idempotency_keys WHERE key = ? AND state = 'in-progress'").run(key);
  }

  purgeExpired(): number {
    return this.db.prepare('DELETE FROM idempotency_keys WHERE expires_at <= ?').run(this.clock()).changes;
  }
}
