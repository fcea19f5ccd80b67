/**
 * State that outlives a plan, looked up by name when a plan is compiled: each pool's PoolState
 * (budgets, TTFB window, health) and each route's sticky-session table. A reload reconfigures
 * these in place; a pool or route that disappears has its state closed when the plan that still
 * used it is applied.
 */
import type { PoolConfig, RateLimitsConfig } from '../../config/types.js';
import { InProcessStore } from '../ratelimit/in-process-store.js';
import { RateLimiter } from '../ratelimit/rate-limiter.js';
import { RedisStore } from '../ratelimit/redis-store.js';
import { SharedMemoryStore } from '../ratelimit/shared-memory-store.js';
import type { SharedTable } from '../runtime/shared-table.js';
import type { HealthRelay } from './health-wiring.js';
import type { Logger } from '../runtime/logger.js';
import { PoolState } from '../pool/pool-state.js';
import type { AdmissionRelayClient } from '../runtime/admission-relay.js';
import { StickyStore, StickyTable } from '../route/sticky-table.js';

export class RuntimeState {
  readonly pools = new Map<string, PoolState>();
  /** The worker threads' shared table (`server.workers` above 1), or null with one thread. */
  readonly shared: SharedTable | null;
  /** Each route's view of the sticky store, by route name. */
  readonly sticky = new Map<string, StickyTable>();
  /**
   * Every route's sticky sessions: in shared memory with worker threads (made by the main thread,
   * mapped by the workers), else created on first use; null before any route had one.
   */
  stickyStore: StickyStore | null;
  /** The process-wide rate limiter (its store and counters outlive reloads); null until needed. */
  limiter: RateLimiter | null = null;
  /** In a worker thread: where its pools' attempt outcomes go (the main thread judges health). */
  healthRelay: HealthRelay | null = null;
  /** In a worker thread: where its pools with a reserve offer their requests (admission-relay.ts). */
  admissionRelay: AdmissionRelayClient | null = null;

  /**
   * `shared`: the worker threads' table, or null with one thread. `sticky`: a worker's view of the
   * main thread's sticky store (`stickyBuffer`); without it, with `shared` the store is made in
   * shared memory now, else on first use.
   */
  constructor(shared: SharedTable | null = null, sticky?: SharedArrayBuffer) {
    this.shared = shared;
    this.stickyStore =
      sticky !== undefined
        ? new StickyStore({ buffer: sticky })
        : shared !== null
          ? new StickyStore({ shared: true })
          : null;
  }

  /** The sticky store's shared buffer, for worker threads; null with one thread. */
  get stickyBuffer(): SharedArrayBuffer | null {
    const b = this.stickyStore?.buffer;
    return b instanceof SharedArrayBuffer ? b : null;
  }

  /** The rate limiter, created on first use with the store the config names. */
  rateLimiter(config: RateLimitsConfig, log: Logger): RateLimiter {
    if (this.limiter === null) {
      const r = config.redis;
      const store =
        config.store === 'redis' && r !== undefined
          ? new RedisStore({
              url: r.url,
              keyPrefix: r.key_prefix,
              failMode: r.fail_mode,
              timeoutMs: r.timeout_ms,
              connectTimeoutMs: r.connect_timeout_ms,
              reconnectMaxDelayMs: r.reconnect_max_delay_ms,
              time: r.time,
              logger: log,
            })
          : this.shared !== null
            ? new SharedMemoryStore(this.shared)
            : new InProcessStore();
      this.limiter = new RateLimiter({ store, logger: log, shared: this.shared });
    }
    return this.limiter;
  }

  /** The state of pool `config.name`, created or reconfigured. */
  poolState(config: PoolConfig): PoolState {
    let s = this.pools.get(config.name);
    if (s === undefined) {
      s = new PoolState(config, this.shared, this.admissionRelay);
      this.pools.set(config.name, s);
    } else {
      s.configure(config);
    }
    return s;
  }

  /** The sticky table of a route, created on first use. */
  stickyTable(route: string): StickyTable {
    let t = this.sticky.get(route);
    if (t === undefined) {
      this.stickyStore ??= new StickyStore();
      t = new StickyTable(this.stickyStore, route);
      this.sticky.set(route, t);
    }
    return t;
  }

  /**
   * Forgets pools and routes the new config no longer has. Returns the removed pools' states: the
   * plan that still uses them closes them when its last request finishes (queued requests there
   * are served, not dropped, by a reload).
   */
  retain(pools: ReadonlySet<string>, routes: ReadonlySet<string>): PoolState[] {
    const removed: PoolState[] = [];
    for (const [name, s] of this.pools) {
      if (!pools.has(name)) {
        removed.push(s);
        this.pools.delete(name);
      }
    }
    for (const name of this.sticky.keys()) if (!routes.has(name)) this.sticky.delete(name);
    return removed;
  }

  /** Stops every timer and closes the rate-limit store (shutdown). */
  async close(): Promise<void> {
    for (const s of this.pools.values()) s.close();
    const store = this.limiter?.store;
    this.limiter = null;
    if (store instanceof RedisStore) await store.close();
  }
}
