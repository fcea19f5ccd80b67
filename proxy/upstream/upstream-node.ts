/**
 * One upstream endpoint (a GPU node): its keep-alive connections (Sluice's own HTTP/1.1 client for
 * `http:` nodes, an undici Pool for `https:` ones) and the live counters the balancer and metrics
 * read. It never decides where a request goes.
 */
import type { Pool } from 'undici';
import { NodeTiming } from '../balance/node-timing.js';
import { H1Client, type UpstreamHandler } from './h1-client.js';
import { privateCells, type NodeLoadCells } from '../runtime/shared-table.js';
import { undiciPackage } from '../runtime/optional-modules.js';

/** Connection settings that identify a node's pool; nodes with equal settings share one Pool. */
export interface NodeConnectionOptions {
  /** Most connections (each carries one request at a time); 0: no cap. */
  connections: number;
  /** TCP connect timeout, ms. */
  connectTimeoutMs: number;
  /** The client for an `http:` node: Sluice's own (`sluice`, the default) or undici's; `https:` nodes always use undici. */
  client?: 'sluice' | 'undici';
}

/** Per-attempt options the lifecycle passes to `dispatch`. */
export interface AttemptOptions {
  method: string;
  /** Path with query string. */
  path: string;
  /** Flat `[name, value, ...]`, already cleaned of hop-by-hop headers. */
  headers: string[];
  body: Buffer | null;
  /** Time to the response head, ms; 0 disables. */
  ttfbMs: number;
  /** Longest gap between body chunks, ms; 0 disables. */
  idleMs: number;
}

export class UpstreamNode {
  /** Stable id: the base URL (`http://10.0.0.7:8000`). */
  readonly id: string;
  readonly origin: string;
  readonly options: NodeConnectionOptions;
  /**
   * The node's load cells (runtime/shared-table.ts): attempts in flight at `cell`, their summed cost at
   * `cell + 1`; shared with the other worker threads when there are several.
   */
  private readonly load: Int32Array;
  private readonly cell: number;
  /** True when `load` is shared with other threads: changes are atomic; plain arithmetic otherwise. */
  private readonly atomic: boolean;
  /** A worker thread's ledger of what it holds of `load` (shared-table.ts), else null. */
  private readonly ledger: Int32Array | null;
  /** Circuit breaker: most concurrent attempts; a node at the limit is not eligible (0 while drained). */
  maxInFlight = Infinity;
  /** True while an operator drained the node (admin API): no new attempts, in-flight ones finish. */
  drained = false;
  /** The configured circuit-breaker limit, restored by undrain. */
  private configuredMaxInFlight = Infinity;
  /** False while ejected or failing active health checks (written by the health module). */
  available = true;
  /** Slow start: multiplier (0..1] of the node's weight while it ramps up after coming back. */
  weightFactor = 1;
  /** Decaying average of time to first byte, ms; -1 until the first response (unprobed). */
  ttfbEwmaMs = -1;
  /** Monotonic time of the last `ttfbEwmaMs` update, ms. */
  ttfbUpdatedMs = 0;
  /** Decayed weight of the samples behind `ttfbEwmaMs` (see balance/ttfb-ewma.ts); 0 when unprobed. */
  ttfbWeight = 0;
  /** True while the node's own metrics say it is saturated (queue or KV cache full). */
  saturated = false;
  /** Last scraped `vllm:num_requests_running`, -1 when not scraped. */
  scrapedRunning = -1;
  /** Last scraped `vllm:num_requests_waiting`, -1 when not scraped. */
  scrapedWaiting = -1;
  /** Last scraped `vllm:gpu_cache_usage_perc` (0..1), -1 when not scraped. */
  scrapedKvUsage = -1;
  /**
   * Time to first token and the prefill queue this instance put on the node (balance/node-timing.ts):
   * written by the session, read by least-response-time and cache-aware.
   */
  readonly timing = new NodeTiming();
  /** Attempts sent to this node since start. */
  attempts = 0;
  /** Attempts that failed at the transport level (connect, reset, timeout). */
  failures = 0;
  /** Plans that reference this node; the pool closes when it drops to zero. */
  refs = 0;
  /** The name of the pool the registry made this node for ('' for a node made outside one). */
  poolName = '';
  /** The node's connections: exactly one of the two is set. */
  private readonly h1: H1Client | null;
  private readonly pool: Pool | null;

  /** Attempts dispatched and not yet finished, by every thread. */
  get inFlight(): number {
    // HOT
    return this.load[this.cell]!;
  }

  /** Sum of the `cost` (estimated tokens) of the attempts in flight: load measured in work. */
  get inFlightCost(): number {
    // HOT
    return this.load[this.cell + 1]!;
  }

  /** Sets the in-flight count outright (tests and tools; the request path uses `addLoad`). */
  set inFlight(n: number) {
    Atomics.store(this.load, this.cell, n);
  }

  /** Sets the in-flight cost outright (tests and tools; the request path uses `addLoad`). */
  set inFlightCost(n: number) {
    Atomics.store(this.load, this.cell + 1, n);
  }

  /** Counts one attempt of estimated `cost` on the node (atomic across threads). */
  addLoad(cost: number): void {
    // HOT
    const load = this.load;
    const at = this.cell;
    if (!this.atomic) {
      load[at]!++;
      load[at + 1]! += cost | 0;
      return;
    }
    Atomics.add(load, at, 1);
    if (cost !== 0) Atomics.add(load, at + 1, cost);
    const l = this.ledger;
    if (l !== null) {
      l[at]!++;
      l[at + 1]! += cost;
    }
  }

  /**
   * Counts one attempt like `addLoad` if the node is below its circuit-breaker limit, as one atomic
   * step: with worker threads, two that picked the node's last slot at once cannot both take it.
   * False (nothing counted) when the node is full.
   */
  tryAddLoad(cost: number): boolean {
    // HOT
    const max = this.maxInFlight;
    const load = this.load;
    const at = this.cell;
    if (!this.atomic) {
      if (load[at]! >= max) return false;
      load[at]!++;
      load[at + 1]! += cost | 0;
      return true;
    }
    if (max === Infinity) Atomics.add(load, at, 1);
    else
      for (;;) {
        const n = Atomics.load(load, at);
        if (n >= max) return false;
        if (Atomics.compareExchange(load, at, n, n + 1) === n) break;
      }
    if (cost !== 0) Atomics.add(load, at + 1, cost);
    const l = this.ledger;
    if (l !== null) {
      l[at]!++;
      l[at + 1]! += cost;
    }
    return true;
  }

  /** Gives back what `addLoad(cost)` counted. */
  removeLoad(cost: number): void {
    // HOT
    const load = this.load;
    const at = this.cell;
    if (!this.atomic) {
      load[at]!--;
      load[at + 1]! -= cost | 0;
      return;
    }
    Atomics.sub(load, at, 1);
    if (cost !== 0) Atomics.sub(load, at + 1, cost);
    const l = this.ledger;
    if (l !== null) {
      l[at]!--;
      l[at + 1]! -= cost;
    }
  }

  /** Sets the circuit-breaker limit from the config (kept at 0 while the node is drained). */
  setMaxInFlight(limit: number): void {
    this.configuredMaxInFlight = limit;
    this.maxInFlight = this.drained ? 0 : limit;
  }

  /**
   * Drains (true) or undrains the node. A drained node is never eligible (its in-flight limit is 0),
   * so balancers skip it and affinity keys move to their next node; requests already on it finish.
   * Survives reloads: the node object is kept while a plan references it.
   */
  setDrained(drained: boolean): void {
    this.drained = drained;
    this.maxInFlight = drained ? 0 : this.configuredMaxInFlight;
  }

  constructor(url: string, options: NodeConnectionOptions, load: NodeLoadCells = privateCells()) {
    this.load = load.cells;
    this.cell = load.cell;
    this.atomic = load.cells.buffer instanceof SharedArrayBuffer;
    this.ledger = load.ledger ?? null;
    const u = new URL(url);
    this.origin = u.origin;
    this.id = u.origin;
    this.options = options;
    if (u.protocol === 'http:' && options.client !== 'undici') {
      this.h1 = new H1Client(this.origin, {
        connections: options.connections,
        connectTimeoutMs: options.connectTimeoutMs,
        keepAliveMs: 30_000,
      });
      this.pool = null;
    } else {
      // TLS to the node (Sluice's own client speaks plain HTTP/1.1 only), or asked for by the pool.
      this.h1 = null;
      this.pool = new (undiciPackage().Pool)(this.origin, {
        connections: options.connections > 0 ? options.connections : null,
        pipelining: 1,
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 600_000,
        connect: { timeout: options.connectTimeoutMs, noDelay: true },
      });
    }
  }

  /**
   * Sends one attempt. `handler` receives the response through the raw handler callbacks
   * (`onConnect`, `onHeaders`, `onData`, `onComplete`, `onError`; see h1-client.ts).
   */
  dispatch(opts: AttemptOptions, handler: UpstreamHandler): void {
    // HOT
    const h1 = this.h1;
    if (h1 !== null) {
      h1.dispatch(opts, handler);
      return;
    }
    this.pool!.dispatch(
      {
        method: opts.method,
        path: opts.path,
        headers: opts.headers,
        body: opts.body,
        headersTimeout: opts.ttfbMs,
        bodyTimeout: opts.idleMs,
        blocking: true,
        idempotent: false,
      },
      handler,
    );
  }

  /** Closes the connections after the node's in-flight requests finish. */
  async close(): Promise<void> {
    if (this.h1 !== null) await this.h1.close();
    else await this.pool!.close();
  }

  /** Destroys every connection now (shutdown past the drain deadline). */
  async destroy(): Promise<void> {
    if (this.h1 !== null) await this.h1.destroy();
    else await this.pool!.destroy();
  }
}
