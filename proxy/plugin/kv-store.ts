/**
 * The plugins' key-value stores: one process-wide backend (in process, or Redis), seen by each
 * plugin instance through a view that prefixes its keys with the instance name. The backend lives
 * across reloads, so an instance that keeps its name after a reload finds its keys again. Never on
 * the request path unless a plugin calls it.
 */
import { redisPackage } from '../runtime/optional-modules.js';
import type { KeyValueStore } from '../../plugins/api.js';
import type { Logger } from '../runtime/logger.js';

/** A backend: raw keys, already namespaced. */
export interface KvBackend {
  readonly kind: 'memory' | 'redis';
  get(key: string): Promise<string | null>;
  set(key: string, value: string, ttlMs: number): Promise<void>;
  delete(key: string): Promise<void>;
  incr(key: string, by: number, ttlMs: number): Promise<number>;
  close(): Promise<void>;
}

interface MemoryEntry {
  value: string;
  /** Epoch ms after which the entry is gone; 0 = never. */
  expiresAt: number;
}

/** In-process backend: at most `maxEntries` keys, the least recently used dropped first. */
export class MemoryKv implements KvBackend {
  readonly kind = 'memory';
  private readonly map = new Map<string, MemoryEntry>();
  private readonly maxEntries: number;
  private readonly now: () => number;

  constructor(maxEntries: number, now: () => number = Date.now) {
    this.maxEntries = maxEntries;
    this.now = now;
  }

  /** Keys held now (expired ones included until touched). */
  get size(): number {
    return this.map.size;
  }

  private live(key: string): MemoryEntry | undefined {
    const e = this.map.get(key);
    if (e === undefined) return undefined;
    if (e.expiresAt !== 0 && e.expiresAt <= this.now()) {
      this.map.delete(key);
      return undefined;
    }
    // Map order is the recency order: move the key to the end.
    this.map.delete(key);
    this.map.set(key, e);
    return e;
  }

  private put(key: string, e: MemoryEntry): void {
    this.map.delete(key);
    this.map.set(key, e);
    while (this.map.size > this.maxEntries) {
      const oldest = this.map.keys().next();
      if (oldest.done === true) break;
      this.map.delete(oldest.value);
    }
  }

  get(key: string): Promise<string | null> {
    return Promise.resolve(this.live(key)?.value ?? null);
  }

  set(key: string, value: string, ttlMs: number): Promise<void> {
    this.put(key, { value, expiresAt: ttlMs > 0 ? this.now() + ttlMs : 0 });
    return Promise.resolve();
  }

  delete(key: string): Promise<void> {
    this.map.delete(key);
    return Promise.resolve();
  }

  incr(key: string, by: number, ttlMs: number): Promise<number> {
    const e = this.live(key);
    const next = (e === undefined ? 0 : Number(e.value) || 0) + by;
    this.put(key, { value: String(next), expiresAt: e?.expiresAt ?? (ttlMs > 0 ? this.now() + ttlMs : 0) });
    return Promise.resolve(next);
  }

  close(): Promise<void> {
    this.map.clear();
    return Promise.resolve();
  }
}

/** Options of the Redis backend (YAML `plugin_store.redis`). */
export interface RedisKvOptions {
  url: string;
  keyPrefix: string;
  /** Per-operation timeout, ms. */
  timeoutMs: number;
  connectTimeoutMs: number;
  reconnectMaxDelayMs: number;
  logger: Logger;
}

/**
 * Redis backend. Connects in the background and reconnects with capped backoff; while it is not
 * connected every call rejects at once, and a call that takes longer than `timeoutMs` rejects.
 */
export class RedisKv implements KvBackend {
  readonly kind = 'redis';
  private readonly client;
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly log: Logger;
  private healthy = true;

  constructor(o: RedisKvOptions) {
    this.prefix = o.keyPrefix;
    this.timeoutMs = o.timeoutMs;
    this.log = o.logger;
    this.client = redisPackage().createClient({
      url: o.url,
      disableOfflineQueue: true,
      socket: {
        connectTimeout: o.connectTimeoutMs,
        reconnectStrategy: (retries: number) =>
          Math.min(50 * 2 ** Math.min(retries, 16), o.reconnectMaxDelayMs),
      },
    });
    this.client.on('error', (err: unknown) => {
      if (this.healthy) this.log.warn(`plugin store: redis unavailable: ${String(err)}`);
      this.healthy = false;
    });
    this.client.on('ready', () => {
      if (!this.healthy) this.log.info('plugin store: redis available again');
      this.healthy = true;
    });
    this.client.connect().catch(() => undefined);
  }

  /** Resolves once connected; rejects after `timeoutMs` (tests, startup checks). */
  async ready(timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.client.isReady) {
      if (Date.now() > deadline) throw new Error(`plugin store: redis not ready within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  private bounded<T>(op: () => Promise<T>): Promise<T> {
    if (!this.client.isReady) return Promise.reject(new Error('plugin store: redis is not connected'));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`plugin store: redis did not answer within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
    });
    return Promise.race([op(), timeout]).finally(() => clearTimeout(timer));
  }

  get(key: string): Promise<string | null> {
    return this.bounded(() => this.client.get(this.prefix + key));
  }

  set(key: string, value: string, ttlMs: number): Promise<void> {
    const k = this.prefix + key;
    return this.bounded(async () => {
      if (ttlMs > 0) await this.client.set(k, value, { expiration: { type: 'PX', value: Math.ceil(ttlMs) } });
      else await this.client.set(k, value);
    });
  }

  delete(key: string): Promise<void> {
    return this.bounded(async () => {
      await this.client.del(this.prefix + key);
    });
  }

  incr(key: string, by: number, ttlMs: number): Promise<number> {
    const k = this.prefix + key;
    return this.bounded(async () => {
      const n = await this.client.incrBy(k, by);
      if (ttlMs > 0 && n === by) await this.client.pExpire(k, Math.ceil(ttlMs));
      return n;
    });
  }

  async close(): Promise<void> {
    try {
      await this.client.close();
    } catch {
      this.client.destroy();
    }
  }
}

/** The view one plugin instance gets: its keys live under `<instance>:`. */
export function kvView(backend: KvBackend, instance: string): KeyValueStore {
  const ns = `${instance}:`;
  return {
    kind: backend.kind,
    get: (key) => backend.get(ns + key),
    set: (key, value, ttlMs = 0) => backend.set(ns + key, value, ttlMs),
    delete: (key) => backend.delete(ns + key),
    incr: (key, by = 1, ttlMs = 0) => backend.incr(ns + key, by, ttlMs),
  };
}
