/**
 * The health of one pool's nodes: passive outlier ejection from real traffic, active checks, slow
 * start and metrics scraping, combined into the fields balancing reads (`available`, `weightFactor`,
 * `saturated`). One instance per pool name lives across reloads; it never picks nodes or sends traffic.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { ActiveChecker, CheckState } from './active-check.js';
import {
  HealthEventKind,
  resolveHealthOptions,
  type PoolHealthOptions,
  type ResolvedHealthOptions,
} from './health-options.js';
import { snapshotNode, type NodeHealthSnapshot, type PoolHealthSnapshot } from './health-snapshot.js';
import { MetricsScraper } from './metrics-scraper.js';
import { NodeHealth } from './node-health.js';
import { OutlierDetector } from './outlier-detector.js';
import { ProbeClient } from './probe-client.js';
import { slowStartFactor, slowStartTickMs } from './slow-start.js';

/** Where state changes are logged (info; warn for a refused ejection). */
export interface PoolHealthLog {
  info(msg: string): void;
  warn(msg: string): void;
}

/** Longest delay `setTimeout` accepts, ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Health of one pool. Create it once per pool name, call `update` with the pool's nodes at start and
 * on every reload, feed it every attempt's outcome, and `close` it when the pool is gone.
 *
 * @example
 * const health = new PoolHealth('chat', { activeCheck: { intervalMs: 2000 } }, logger);
 * health.update(nodes, options);
 * // per attempt, from the session:
 * health.recordFailure(node, 'ECONNRESET');
 */
export class PoolHealth {
  /** The pool's name, used in logs and events. */
  readonly poolName: string;
  private opts: ResolvedHealthOptions;
  private readonly log: PoolHealthLog | null;
  private readonly states = new Map<UpstreamNode, NodeHealth>();
  private readonly outlier: OutlierDetector;
  private readonly client = new ProbeClient();
  /** Nodes out of rotation now (ejected or failing checks). */
  private outCount = 0;
  /** Nodes the pool gives weight 0: they take no traffic, so they cannot stand in for an ejected one. */
  private weightless: ReadonlySet<UpstreamNode> = new Set();
  /** Timer of the next ejection end or slow-start step; null when nothing is due. */
  private timer: NodeJS.Timeout | null = null;
  /** False until the first `update`: nodes present at first start do not slow-start. */
  private started = false;
  private closed = false;
  /**
   * A worker thread's tracker (`server.workers`): attempt outcomes go to the main thread through
   * this function, which judges every thread's outcomes; the nodes' health fields are copied from
   * the main thread's. Null: this tracker judges (one thread, or the main thread).
   */
  relay: ((node: UpstreamNode, reason: string | null) => void) | null = null;

  /**
   * @param poolName the pool's name (logs, events, snapshot).
   * @param options health options; see `PoolHealthOptions` for the defaults. Throws `RangeError` for
   *   a value out of range. Nothing starts until `update` gives the nodes.
   * @param log where state changes are logged; default: nowhere.
   */
  constructor(poolName: string, options: PoolHealthOptions, log?: PoolHealthLog) {
    this.poolName = poolName;
    this.opts = resolveHealthOptions(options);
    this.log = log ?? null;
    this.outlier = new OutlierDetector(this.opts.outlier);
  }

  /**
   * Sets the pool's nodes and options: called at start and on every reload. Nodes that stay keep
   * their state (failure counts, ejection, check verdict, ramp); nodes that left are forgotten
   * (their checker and scraper stop and their health fields return to the defaults); nodes added
   * after the first call start in slow start. Checkers and scrapers are started, stopped or
   * reconfigured to match `options`. Throws `RangeError` for an option out of range (nothing changes).
   */
  update(
    nodes: readonly UpstreamNode[],
    options: PoolHealthOptions,
    weightless: ReadonlySet<UpstreamNode> = new Set(),
  ): void {
    if (this.closed) throw new Error(`health of pool ${this.poolName} is closed`);
    const opts = resolveHealthOptions(options);
    this.opts = opts;
    this.weightless = weightless;
    this.outlier.options = opts.outlier;
    const now = opts.now();
    const keep = new Set(nodes);
    // A reload that changes a node's connection settings gives it a new object for the same URL:
    // its verdict (ejection, failing checks, ramp) carries over instead of starting clean.
    const leaving = new Map<string, NodeHealth>();
    for (const h of [...this.states.values()]) {
      if (keep.has(h.node)) continue;
      leaving.set(h.node.id, carriedHealth(h));
      this.forget(h);
    }
    for (const node of nodes) {
      let h = this.states.get(node);
      if (h === undefined) {
        const before = leaving.get(node.id);
        h = new NodeHealth(node);
        this.states.set(node, h);
        if (before !== undefined) {
          this.adopt(h, before);
        } else {
          node.available = true;
          node.weightFactor = 1;
          if (this.started) this.startRamp(h, now);
        }
      }
      this.configureChecker(h);
      this.configureScraper(h);
      if (opts.outlier.consecutiveFailures === 0 && h.ejected) {
        this.outlier.release(h, now);
        this.settle(h, now, HealthEventKind.ejectionEnded, 'outlier ejection disabled');
      }
    }
    this.started = true;
    this.refresh();
  }

  /** Counts a successful attempt on `node` (a response from the node that is not a 5xx). */
  recordSuccess(node: UpstreamNode): void {
    // HOT
    if (this.relay !== null) {
      this.relay(node, null);
      return;
    }
    const h = this.states.get(node);
    if (h !== undefined) this.outlier.onSuccess(h);
  }

  /**
   * Counts a failed attempt on `node` (transport error, timeout, or a 5xx from the node). The node is
   * ejected by the very failure that reaches `consecutiveFailures`, unless the ejection cap or the
   * last-node rule forbids it (then each further failure tries again).
   */
  recordFailure(node: UpstreamNode, reason: string): void {
    // HOT
    if (this.relay !== null) {
      this.relay(node, reason);
      return;
    }
    const h = this.states.get(node);
    if (h !== undefined && this.outlier.onFailure(h, reason)) this.tryEject(h);
  }

  /**
   * Re-evaluates the time-driven state against the clock: ends ejections whose time is up and steps
   * slow-start ramps. The pool's own timer calls it when something is due, so callers never need
   * to; with an injected clock (tests), call it after moving the clock.
   */
  refresh(): void {
    if (this.closed) return;
    const { now, slowStartMs, minWeightFactor } = this.opts;
    const t = now();
    let nextMs = Infinity;
    let ramping = false;
    for (const h of this.states.values()) {
      if (h.ejected) {
        if (h.ejectedUntilMs <= t) this.endEjection(h, t);
        else nextMs = Math.min(nextMs, h.ejectedUntilMs);
      }
      if (h.rampStartMs >= 0) {
        const f = slowStartFactor(t - h.rampStartMs, slowStartMs, minWeightFactor);
        h.node.weightFactor = f;
        if (f >= 1) {
          h.rampStartMs = -1;
          this.emit(HealthEventKind.slowStartDone, h, 'weight factor back to 1');
        } else {
          ramping = true;
        }
      }
    }
    if (ramping) nextMs = Math.min(nextMs, t + slowStartTickMs(slowStartMs));
    this.schedule(nextMs - t);
  }

  /** The pool's health now, for the admin API. */
  snapshot(): PoolHealthSnapshot {
    const t = this.opts.now();
    const decayMs = this.opts.outlier.ejectionDecayMs;
    const nodes: NodeHealthSnapshot[] = [];
    for (const h of this.states.values()) nodes.push(snapshotNode(h, t, decayMs));
    return { pool: this.poolName, ejected: this.outlier.ejectedCount, unavailable: this.outCount, nodes };
  }

  /**
   * Stops every checker, scraper and timer and closes the probe connections. The nodes keep their
   * last `available` and `weightFactor`; scraped gauges are cleared (-1, not saturated) silently.
   * Later `record*` calls are ignored and `update` throws. Idempotent.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (const h of this.states.values()) {
      h.checker?.stop();
      h.scraper?.stop();
    }
    this.states.clear();
    this.client.close();
  }

  /**
   * Nodes that take traffic now: in rotation, not drained by an operator, weight above 0. The
   * last-node rule counts these (ejecting the only one would leave the pool with no node at all),
   * and so does the pool's admission capacity.
   */
  servingCount(): number {
    let n = 0;
    for (const h of this.states.values()) if (this.serves(h)) n++;
    return n;
  }

  private serves(h: NodeHealth): boolean {
    // A worker thread's verdicts are the main thread's, copied into the node.
    const out = this.relay === null ? h.out : !h.node.available;
    return !out && !h.node.drained && !this.weightless.has(h.node);
  }

  private tryEject(h: NodeHealth): void {
    // A node failing its active checks is out already; ejecting it would only spend the cap.
    if (h.checkDown) return;
    // The candidate counts as one of the available (a drained or weightless one serves nobody, but
    // ejecting it takes no traffic from anyone either).
    const serving = this.servingCount() + (this.serves(h) ? 0 : 1);
    const refusal = this.outlier.refusal(this.states.size, serving);
    if (refusal !== null) {
      if (!h.skipReported) {
        h.skipReported = true;
        this.emit(
          HealthEventKind.ejectionSkipped,
          h,
          `${h.consecutiveFailures} consecutive failures (last: ${h.lastFailure ?? '?'}) but ${refusal}`,
        );
      }
      return;
    }
    const failures = h.consecutiveFailures;
    const t = this.opts.now();
    const durationMs = this.outlier.eject(h, t);
    this.settle(
      h,
      t,
      HealthEventKind.ejected,
      `${failures} consecutive failures (last: ${h.lastFailure ?? '?'}); ejection ${h.ejectionCount} for ${durationMs} ms`,
    );
    this.refresh();
  }

  private endEjection(h: NodeHealth, t: number): void {
    this.outlier.release(h, t);
    this.settle(h, t, HealthEventKind.ejectionEnded, `ejection ${h.ejectionCount} over`);
  }

  /**
   * Follows up a change the caller made to `h.ejected` or `h.checkDown`: writes `node.available`,
   * reports `kind` (after the change, so observers see the new state), and when the node is back in
   * rotation starts its slow start and reports the return.
   */
  private settle(h: NodeHealth, t: number, kind: HealthEventKind, reason: string): void {
    const out = h.ejected || h.checkDown;
    const changed = out !== h.out;
    if (changed) {
      h.out = out;
      h.node.available = !out;
      if (out) {
        this.outCount++;
        h.rampStartMs = -1;
      } else {
        this.outCount--;
        // Failures counted before the node went out say nothing about it now.
        h.consecutiveFailures = 0;
        this.startRamp(h, t);
      }
    }
    this.emit(kind, h, reason);
    if (changed && !out) {
      this.emit(
        HealthEventKind.returned,
        h,
        this.opts.slowStartMs > 0
          ? `back in rotation, slow start over ${this.opts.slowStartMs} ms from weight factor ${this.opts.minWeightFactor}`
          : 'back in rotation',
      );
    }
  }

  private startRamp(h: NodeHealth, t: number): void {
    if (this.opts.slowStartMs <= 0) {
      h.node.weightFactor = 1;
      return;
    }
    h.rampStartMs = t;
    h.node.weightFactor = this.opts.minWeightFactor;
  }

  private configureChecker(h: NodeHealth): void {
    const options = this.opts.activeCheck;
    if (options === null) {
      h.checker?.stop();
      h.checker = null;
      // Also a verdict carried from a replaced object of the node, which has no checker yet.
      if (h.checkDown) {
        h.checkDown = false;
        this.settle(h, this.opts.now(), HealthEventKind.checkUp, 'active checks disabled');
      }
      return;
    }
    if (h.checker !== null) {
      h.checker.reconfigure(options);
      return;
    }
    h.checker = new ActiveChecker(h.node.origin, options, this.client, (down, reason) => {
      if (this.closed || this.states.get(h.node) !== h) return;
      h.checkDown = down;
      this.settle(h, this.opts.now(), down ? HealthEventKind.checkDown : HealthEventKind.checkUp, reason);
      this.refresh();
    });
    // A node found down before a reload replaced its object stays down until it passes
    // healthy_threshold probes, as with its old checker (a fresh checker would go up silently).
    if (h.checkDown) h.checker.state = CheckState.down;
    h.checker.start();
  }

  private configureScraper(h: NodeHealth): void {
    const options = this.opts.scrape;
    if (options === null) {
      h.scraper?.stop();
      h.scraper = null;
      return;
    }
    if (h.scraper !== null) {
      h.scraper.reconfigure(options);
      return;
    }
    h.scraper = new MetricsScraper(h.node, options, this.client, (saturated, reason) => {
      if (this.closed) return;
      this.emit(saturated ? HealthEventKind.saturated : HealthEventKind.unsaturated, h, reason);
    });
    h.scraper.start();
  }

  /** Gives `h` (a new object of a node) the verdict `before` carried from its previous object. */
  private adopt(h: NodeHealth, before: NodeHealth): void {
    h.out = before.out;
    h.consecutiveFailures = before.consecutiveFailures;
    h.lastFailure = before.lastFailure;
    h.ejected = before.ejected;
    h.ejectedUntilMs = before.ejectedUntilMs;
    h.ejectionCount = before.ejectionCount;
    h.lastEjectionEndMs = before.lastEjectionEndMs;
    h.skipReported = before.skipReported;
    h.checkDown = before.checkDown;
    h.rampStartMs = before.rampStartMs;
    if (h.out) this.outCount++;
    if (h.ejected) this.outlier.ejectedCount++;
    h.node.available = !h.out;
    // A ramp's factor follows from rampStartMs: `refresh` (at the end of `update`) sets it.
    h.node.weightFactor = 1;
  }

  private forget(h: NodeHealth): void {
    h.checker?.stop();
    h.checker = null;
    h.scraper?.stop();
    h.scraper = null;
    this.outlier.forget(h);
    if (h.out) this.outCount--;
    this.states.delete(h.node);
    const n = h.node;
    n.available = true;
    n.weightFactor = 1;
    n.saturated = false;
  }

  private schedule(delayMs: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (!Number.isFinite(delayMs)) return;
    // +1: the health clock and the timer clock round differently; never wake just before the deadline.
    this.timer = setTimeout(this.onTimer, Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(delayMs) + 1)));
    this.timer.unref();
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    this.refresh();
  };

  private emit(kind: HealthEventKind, h: NodeHealth, reason: string): void {
    const msg = `health: pool ${this.poolName} node ${h.node.id} ${kind}: ${reason}`;
    if (kind === HealthEventKind.ejectionSkipped) this.log?.warn(msg);
    else this.log?.info(msg);
    this.opts.onEvent?.({ kind, pool: this.poolName, node: h.node.id, reason });
  }
}

/** A copy of `h`'s verdict, taken before `forget` resets its node. */
function carriedHealth(h: NodeHealth): NodeHealth {
  const c = new NodeHealth(h.node);
  c.out = h.out;
  c.consecutiveFailures = h.consecutiveFailures;
  c.lastFailure = h.lastFailure;
  c.ejected = h.ejected;
  c.ejectedUntilMs = h.ejectedUntilMs;
  c.ejectionCount = h.ejectionCount;
  c.lastEjectionEndMs = h.lastEjectionEndMs;
  c.skipReported = h.skipReported;
  c.checkDown = h.checkDown;
  c.rampStartMs = h.rampStartMs;
  return c;
}
