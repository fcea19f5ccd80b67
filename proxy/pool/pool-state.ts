/**
 * What a pool keeps across config reloads under its name: retry and hedge budgets, its recent TTFB
 * window (hedging delay), failure-handling counters and the health tracker of its nodes. A reload
 * reconfigures it in place, so budgets and counters are not reset by an edit.
 */
import type { PoolConfig } from '../../config/types.js';
import { AdmissionController } from '../admission/admission-controller.js';
import type { SharedAdaptiveState } from '../admission/adaptive-limit.js';
import { RemoteAdmission, type AdmissionRelayClient } from '../runtime/admission-relay.js';
import type { PoolHealth } from '../health/pool-health.js';
import { TokenBudget } from './token-budget.js';
import { TtfbWindow } from './ttfb-window.js';
import type { SharedTable } from '../runtime/shared-table.js';

/** Hedging settings resolved for the request path. */
export interface HedgeSettings {
  minDelayMs: number;
  minSamples: number;
}

export class PoolState {
  readonly name: string;
  retryBudget: TokenBudget;
  hedgeBudget: TokenBudget | null = null;
  hedge: HedgeSettings | null = null;
  /**
   * Recent head times of answers that are not streamed, for their hedge delay; null when the pool
   * does not hedge.
   */
  ttfb: TtfbWindow | null = null;
  /** Recent times to first token of streamed answers, for their hedge delay; null when the pool does not hedge. */
  ttft: TtfbWindow | null = null;
  /** Health of the pool's nodes (attempt outcomes go here); null until the plan attaches it. */
  health: PoolHealth | null = null;
  /** The pool's admission queue; null when the pool has no `admission` section. */
  admission: AdmissionController | null = null;
  /** Admission settings read per request. */
  admissionSettings: { defaultDeadlineMs: number; maxDeadlineMs: number; fairTokens: boolean } | null = null;
  private admissionKey = '';
  /** Requests that found no eligible node here (before fallbacks). */
  noNode = 0;
  /** Requests served by a fallback pool instead of this one. */
  fellBack = 0;
  /** Retries dispatched. */
  retries = 0;
  /** Hedged attempts dispatched, and how many of them won. */
  hedges = 0;
  hedgeWins = 0;
  /** Health state changes of the pool's nodes by kind (ejected, check-down, returned, ...). */
  readonly healthEvents = new Map<string, number>();
  private configured = '';

  /** The worker threads' shared table (admission counts), or null with one thread. */
  private readonly shared: SharedTable | null;
  /**
   * In a worker thread: where a pool with `reserve_per_node` offers its requests (the main thread's
   * controller decides for every thread: runtime/admission-relay.ts); null elsewhere.
   */
  private readonly relay: AdmissionRelayClient | null;

  constructor(
    config: PoolConfig,
    shared: SharedTable | null = null,
    relay: AdmissionRelayClient | null = null,
  ) {
    this.name = config.name;
    this.shared = shared;
    this.relay = relay;
    this.retryBudget = new TokenBudget(config.retry_budget.percent, config.retry_budget.min_per_second);
    this.configure(config);
  }

  /** Applies a (re)loaded config; budgets and windows are rebuilt only when their settings change. */
  configure(config: PoolConfig): void {
    this.configureAdmission(config);
    const key = JSON.stringify([config.retry_budget, config.hedge ?? null]);
    if (key === this.configured) return;
    this.configured = key;
    this.retryBudget = new TokenBudget(config.retry_budget.percent, config.retry_budget.min_per_second);
    const h = config.hedge;
    if (h === undefined) {
      this.hedge = null;
      this.hedgeBudget = null;
      this.ttfb = null;
      this.ttft = null;
    } else {
      this.hedge = { minDelayMs: h.min_delay_ms, minSamples: h.min_samples };
      this.hedgeBudget = new TokenBudget(h.budget_percent, 0);
      this.ttfb = new TtfbWindow(h.percentile);
      this.ttft = new TtfbWindow(h.percentile);
    }
  }

  /** Counts a health state change of one of the pool's nodes and resizes admission to match. */
  countHealthEvent(kind: string): void {
    this.healthEvents.set(kind, (this.healthEvents.get(kind) ?? 0) + 1);
    this.servingChanged();
  }

  /**
   * Tells admission how many nodes serve now (after a health change, a reload or a drain), so its
   * capacity counts only those; see `AdmissionController.setServingNodes`.
   */
  servingChanged(): void {
    if (this.admission !== null && this.health !== null)
      this.admission.setServingNodes(this.health.servingCount());
  }

  private configureAdmission(config: PoolConfig): void {
    const a = config.admission;
    if (a === undefined) {
      // New requests are no longer queued; requests already queued or admitted finish on the
      // controller they started with (it has its own expiry timer and is released into).
      this.admission = null;
      this.admissionSettings = null;
      this.admissionKey = '';
      return;
    }
    this.admissionSettings = {
      defaultDeadlineMs: a.default_deadline_ms > 0 ? a.default_deadline_ms : Infinity,
      maxDeadlineMs: a.max_deadline_ms,
      fairTokens: a.fairness === 'tokens',
    };
    // Queue bounds and capacity change in place; only a change of the adaptive limit's settings
    // needs a new controller (the old one keeps serving the requests it admitted or queued).
    // With threads, a reserve is decided by one controller, the main thread's (admission-relay.ts):
    // turning it on or off changes which controller decides (a new one, as for new adaptive
    // settings; the old one finishes what it holds). One thread changes it in place.
    const reserve = a.reserve_per_node > 0;
    const threads = this.relay !== null || this.shared !== null;
    const key = JSON.stringify([a.adaptive ?? null, threads && reserve]);
    if (this.admission !== null && key === this.admissionKey) {
      this.admission.setQueueLimits(a.max_queue, a.max_wait_ms);
      this.admission.setCapacity(
        a.max_in_flight_per_node,
        config.nodes.length,
        a.reserve_per_node,
        a.reserve_window_ms,
      );
      return;
    }
    this.admissionKey = key;
    if (reserve && this.relay !== null) {
      this.admission = new RemoteAdmission(this.relay, config.name);
      return;
    }
    // With worker threads, the main thread's controller of a pool with a reserve decides for
    // every thread by itself (its counts are all the pool's).
    const shared = reserve ? null : this.shared;
    const ad = a.adaptive;
    this.admission = new AdmissionController({
      // With worker threads the pool's counts are shared, and so is an adaptive limit's state (a
      // new one for new settings), except in a pool with a reserve (see below).
      shared: shared === null ? null : shared.record('admission', config.name),
      sharedAdaptive:
        shared === null || a.adaptive === undefined ? null : sharedAdaptiveState(shared, config.name, key),
      maxInFlightPerNode: a.max_in_flight_per_node,
      nodes: config.nodes.length,
      maxQueue: a.max_queue,
      maxWaitMs: a.max_wait_ms,
      reservePerNode: a.reserve_per_node,
      reserveWindowMs: a.reserve_window_ms,
      adaptive:
        ad === undefined
          ? null
          : {
              minLimit: ad.min_limit,
              maxLimit: ad.max_limit,
              tolerance: ad.tolerance,
              smoothing: ad.smoothing,
              shortWindow: ad.short_window,
              longWindow: ad.long_window,
            },
    });
  }

  /** Stops timers owned by the pool (its health tracker). */
  close(): void {
    this.health?.close();
    this.health = null;
    this.admission?.close();
    this.admission = null;
  }

  /**
   * How long an attempt may wait before a hedge is sent, ms: for a streamed request (`stream`) the
   * configured percentile of recent times to first token, else of recent head times; -1 when
   * hedging is off or that window has too few samples yet.
   */
  hedgeDelayMs(stream: boolean): number {
    // HOT
    const h = this.hedge;
    const w = stream ? this.ttft : this.ttfb;
    if (h === null || w === null || w.count < h.minSamples) return -1;
    const p = w.value();
    return p > h.minDelayMs ? p : h.minDelayMs;
  }
}

/**
 * The cells of pool `pool`'s adaptive limit of settings `settings` in the threads' shared table:
 * three Float64s over two records, changed under the table's lock. The main thread, which builds
 * each plan before the workers do, starts the limit afresh (`fresh`) whenever it makes one: a
 * record is never freed, so settings that come back (A, B, then A again, or a pool removed and
 * added) would otherwise find the state they left, learned on another fleet.
 */
export function sharedAdaptiveState(table: SharedTable, pool: string, settings: string): SharedAdaptiveState {
  const a = table.record('adaptive', `${pool}\n${settings}`);
  const b = table.record('adaptive-min', `${pool}\n${settings}`);
  return {
    floats: a.floats,
    estimate: a.float,
    short: a.float + 1,
    min: b.float,
    // The main thread has no ledger (shared-table.ts); a worker joins the state it made.
    fresh: a.fresh || table.ledger === null,
    lock: () => table.lock(),
    unlock: () => table.unlock(),
  };
}
