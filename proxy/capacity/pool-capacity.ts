/**
 * One pool's live capacity estimate: samples its nodes' in-flight and attempt counters and its
 * micro-batchers' counters, keeps them in a sliding window, and turns the window into the observed
 * inputs of the capacity formula and a recommended node count. It only reads counters the request
 * path already keeps; it never adds work to a request.
 */
import type { CapacityConfig, PoolConfig } from '../../config/types.js';
import { recommendNodes, type CapacityRecommendation } from './capacity-model.js';
import { CapacityCounters, CapacityWindow } from './capacity-window.js';

/** Share of node capacity the fleet should use when the pool sets none. */
export const DEFAULT_TARGET_UTILISATION = 0.7; // ratio
/** Sliding window of the observed figures when the pool sets none, ms. */
export const DEFAULT_CAPACITY_WINDOW_MS = 60_000; // ms

/** The live counters of a node the tracker reads (an `UpstreamNode`). */
export interface CapacityNode {
  /** Calls in flight now. */
  readonly inFlight: number; // calls
  /** Calls dispatched since the node was created. */
  readonly attempts: number; // calls
  /** False while ejected or failing health checks. */
  readonly available: boolean;
  /** True while an operator drained it: it takes no new requests. */
  readonly drained: boolean;
}

/** The counters of a micro-batcher the tracker reads (a `MicroBatcherStats`). */
export interface CapacityBatcherStats {
  readonly items: number; // items
  readonly deduplicated: number; // items
  readonly rejected: number; // items
  readonly upstreamCalls: number; // calls
}

/** A micro-batcher whose upstream calls go to the pool. */
export interface CapacityBatcher {
  stats: CapacityBatcherStats;
  mode: 'native' | 'fanout';
  /** Fanout: single-item calls per node the route allows at once. */
  maxConcurrentPerNode: number; // calls
}

/**
 * One pool as the tracker sees it, rebuilt when a plan is compiled. The tracker notices a new plan
 * by the identity of the `nodes` and `batchers` arrays, so keep them stable between plans.
 */
export interface CapacityPoolSource {
  name: string;
  config: PoolConfig;
  nodes: readonly CapacityNode[];
  batchers: readonly CapacityBatcher[];
}

/** Where the per-node concurrency (calls one node works on at once) came from. */
export const CallsPerNodeSource = {
  admission: 'config: admission.max_in_flight_per_node',
  circuitBreaker: 'config: max_in_flight_per_node',
  native: 'native micro-batching: one combined call per node at a time',
  fanout: 'config: batching.max_concurrent_per_node (sum over the fanout routes)',
  observed: 'observed: mean calls in flight per busy node',
} as const;
export type CallsPerNodeSource = (typeof CallsPerNodeSource)[keyof typeof CallsPerNodeSource];

/** The figures of one pool over its window, recomputed every `windowMs / 20`. */
export interface PoolCapacityReport {
  pool: string;
  /** Configured window, ms. */
  windowMs: number; // ms
  /** Time the figures actually cover (shorter than `windowMs` just after start or a change), ms. */
  spanMs: number; // ms
  targetUtilisation: number; // ratio
  /** `config: capacity.target_utilisation`, or `default` when the pool sets none. */
  targetUtilisationSource: string;
  /** Nodes configured in the pool. */
  nodes: number; // nodes
  /** Nodes taking traffic when the report was made. */
  availableNodes: number; // nodes
  /** Items the nodes were given: micro-batched items plus unbatched calls. */
  itemsPerSecond: number; // items/s
  upstreamCallsPerSecond: number; // calls/s
  /** Time-average of the pool's calls in flight. */
  meanCallsInFlight: number; // calls
  /** Mean upstream time of one call (Little's law); null without calls or below sampling resolution. */
  timePerItemMs: number | null; // ms
  /** Mean items carried by one upstream call; null without calls. */
  itemsPerCall: number | null; // items
  /** Calls one node works on at once; null when neither configured nor observed. */
  callsPerNode: number | null; // calls
  callsPerNodeSource: CallsPerNodeSource | null;
  /** `itemsPerCall × callsPerNode`: items one node works on at once; null when either is unknown. */
  batchSize: number | null; // items
  /** Node-equivalents kept fully busy by the load. */
  busyNodes: number; // nodes
  /** `busyNodes ÷ nodes`; null when the pool has no nodes. */
  utilisationNow: number | null; // ratio
  /** The formula's answer (0 without load). */
  recommendedNodes: number; // nodes
  /** The formula applied to the figures above; null when an input is missing. */
  recommendation: CapacityRecommendation | null;
  /** Why a figure is missing or approximate; null when all is measured. */
  note: string | null;
  /** Increases by one each time the report is recomputed (readers can tell two reads apart). */
  sequence: number;
}

/** The capacity settings of a pool with defaults applied. */
export function capacitySettings(config: { capacity?: CapacityConfig }): {
  targetUtilisation: number; // ratio
  windowMs: number; // ms
  /** True when the pool has a `capacity` section (else every value is a default). */
  configured: boolean;
} {
  const c = config.capacity;
  return {
    targetUtilisation: c?.target_utilisation ?? DEFAULT_TARGET_UTILISATION,
    windowMs: c?.window_ms ?? DEFAULT_CAPACITY_WINDOW_MS,
    configured: c !== undefined,
  };
}

/** Last-seen cumulative values of one batcher. */
interface BatcherMark {
  items: number;
  calls: number;
}

function sentItems(s: CapacityBatcherStats): number {
  return s.items - s.deduplicated - s.rejected;
}

/** Samples one pool and keeps its window; owned by the capacity monitor, one per pool name. */
export class PoolCapacityTracker {
  readonly pool: string;
  private window: CapacityWindow;
  private targetUtilisation: number; // ratio
  private targetConfigured: boolean;
  private readonly totals = new CapacityCounters();
  private readonly scratch = new CapacityCounters();
  private lastSampleMs: number; // ms
  /** When the next snapshot is due: on a fixed grid, so the ring spans the window without drift. */
  private nextPushMs: number; // ms
  private nodes: readonly CapacityNode[] = [];
  private batchers: readonly CapacityBatcher[] = [];
  private nodeMarks = new Map<CapacityNode, number>();
  private batcherMarks = new Map<CapacityBatcherStats, BatcherMark>();
  private report: PoolCapacityReport;

  constructor(source: CapacityPoolSource, nowMs: number) {
    this.pool = source.name;
    const s = capacitySettings(source.config);
    this.window = new CapacityWindow(s.windowMs);
    this.targetUtilisation = s.targetUtilisation;
    this.targetConfigured = s.configured;
    this.lastSampleMs = nowMs;
    this.adopt(source);
    this.totals.atMs = nowMs;
    this.window.push(this.totals);
    this.nextPushMs = nowMs + this.window.stepMs;
    this.report = this.compute(source, 0);
  }

  /** Longest sampling interval this pool's window wants, ms (the monitor clamps it to 10–100 ms). */
  get sampleMs(): number {
    return this.window.windowMs / 200;
  }

  /** The latest report (recomputed by `sample` once per window step). */
  get latest(): PoolCapacityReport {
    return this.report;
  }

  /**
   * Takes one sample at monotonic `nowMs`: integrates in-flight since the previous sample, adds the
   * calls and items counted since then, and every `windowMs / 20` pushes a snapshot and recomputes
   * the report. Returns true when the report was recomputed.
   */
  sample(source: CapacityPoolSource, nowMs: number): boolean {
    const s = capacitySettings(source.config);
    this.targetUtilisation = s.targetUtilisation;
    this.targetConfigured = s.configured;
    if (s.windowMs !== this.window.windowMs) {
      // A new window length starts the figures over rather than mixing two step sizes.
      this.window = new CapacityWindow(s.windowMs);
      this.totals.atMs = nowMs;
      this.window.push(this.totals);
      this.nextPushMs = nowMs + this.window.stepMs;
    }
    if (source.nodes !== this.nodes || source.batchers !== this.batchers) this.adopt(source);
    const dt = Math.max(0, nowMs - this.lastSampleMs);
    this.lastSampleMs = nowMs;
    const t = this.totals;
    let inFlight = 0;
    let busy = 0;
    for (const n of this.nodes) {
      inFlight += n.inFlight;
      if (n.inFlight > 0) busy++;
      const prev = this.nodeMarks.get(n) ?? 0;
      if (n.attempts > prev) t.calls += n.attempts - prev;
      this.nodeMarks.set(n, n.attempts);
    }
    // The count found now stands for the whole interval since the previous sample.
    t.inFlightMs += inFlight * dt;
    t.busyNodeMs += busy * dt;
    for (const b of this.batchers) {
      const mark = this.batcherMarks.get(b.stats);
      if (mark === undefined) continue;
      const items = sentItems(b.stats);
      const di = Math.max(0, items - mark.items);
      const dc = Math.max(0, b.stats.upstreamCalls - mark.calls);
      mark.items = items;
      mark.calls = b.stats.upstreamCalls;
      if (b.mode === 'native') {
        t.nativeItems += di;
        t.nativeCalls += dc;
      } else {
        t.fanoutItems += di;
        t.fanoutCalls += dc;
      }
    }
    t.atMs = nowMs;
    if (nowMs < this.nextPushMs) return false;
    this.window.push(t);
    this.nextPushMs += this.window.stepMs;
    // After a stall (a blocked event loop), restart the grid instead of pushing a burst.
    if (this.nextPushMs <= nowMs) this.nextPushMs = nowMs + this.window.stepMs;
    this.report = this.compute(source, this.report.sequence + 1);
    return true;
  }

  /** Starts reading a (new) plan's nodes and batchers, keeping the marks of the ones it shares. */
  private adopt(source: CapacityPoolSource): void {
    // A node or batcher first seen here is new to the pool (created for this plan by the registry
    // or the plan compiler), so its counters started at 0 and all of them count.
    const nodeMarks = new Map<CapacityNode, number>();
    for (const n of source.nodes) nodeMarks.set(n, this.nodeMarks.get(n) ?? 0);
    const batcherMarks = new Map<CapacityBatcherStats, BatcherMark>();
    for (const b of source.batchers)
      batcherMarks.set(b.stats, this.batcherMarks.get(b.stats) ?? { items: 0, calls: 0 });
    this.nodeMarks = nodeMarks;
    this.batcherMarks = batcherMarks;
    this.nodes = source.nodes;
    this.batchers = source.batchers;
  }

  private compute(source: CapacityPoolSource, sequence: number): PoolCapacityReport {
    const d = this.scratch;
    const has = this.window.delta(d);
    const spanMs = has ? d.atMs : 0;
    const spanS = spanMs / 1000;
    let available = 0;
    for (const n of source.nodes) if (n.available && !n.drained) available++;
    const batchedCalls = d.nativeCalls + d.fanoutCalls;
    const plainCalls = Math.max(0, d.calls - batchedCalls);
    const calls = has ? d.calls : 0;
    const items = has ? d.nativeItems + d.fanoutItems + plainCalls : 0;
    const itemsPerSecond = spanS > 0 ? items / spanS : 0;
    const base: PoolCapacityReport = {
      pool: this.pool,
      windowMs: this.window.windowMs,
      spanMs,
      targetUtilisation: this.targetUtilisation,
      targetUtilisationSource: this.targetConfigured ? 'config: capacity.target_utilisation' : 'default',
      nodes: source.nodes.length,
      availableNodes: available,
      itemsPerSecond,
      upstreamCallsPerSecond: spanS > 0 ? calls / spanS : 0,
      meanCallsInFlight: spanMs > 0 ? d.inFlightMs / spanMs : 0,
      timePerItemMs: null,
      itemsPerCall: null,
      callsPerNode: null,
      callsPerNodeSource: null,
      batchSize: null,
      busyNodes: 0,
      utilisationNow: source.nodes.length > 0 ? 0 : null,
      recommendedNodes: 0,
      recommendation: null,
      note: null,
      sequence,
    };
    if (calls === 0 || items === 0) {
      base.note = spanMs > 0 ? 'no upstream calls in the window' : 'window not started';
      return base;
    }
    base.itemsPerCall = items / calls;
    const perNode = this.callsPerNode(source, d, plainCalls);
    base.callsPerNode = perNode.value;
    base.callsPerNodeSource = perNode.source;
    if (d.inFlightMs <= 0 || perNode.value === null) {
      // Every call started and ended between two samples: too short to time at this resolution.
      base.recommendedNodes = 1;
      base.note = 'calls shorter than the sampling interval: time per item not measured';
      return base;
    }
    base.timePerItemMs = d.inFlightMs / calls;
    base.batchSize = base.itemsPerCall * perNode.value;
    const rec = recommendNodes({
      itemsPerSecond,
      timePerItemMs: base.timePerItemMs,
      batchSize: base.batchSize,
      targetUtilisation: this.targetUtilisation,
      currentNodes: source.nodes.length,
    });
    base.busyNodes = rec.busyNodes;
    base.utilisationNow = rec.utilisationNow;
    base.recommendedNodes = rec.nodes;
    base.recommendation = rec;
    return base;
  }

  /** Calls one node works on at once: configured limits first, then what batching implies, then observed. */
  private callsPerNode(
    source: CapacityPoolSource,
    d: CapacityCounters,
    plainCalls: number,
  ): { value: number | null; source: CallsPerNodeSource | null } {
    const c = source.config;
    if (c.admission !== undefined)
      return { value: c.admission.max_in_flight_per_node, source: CallsPerNodeSource.admission };
    if (c.max_in_flight_per_node > 0)
      return { value: c.max_in_flight_per_node, source: CallsPerNodeSource.circuitBreaker };
    if (plainCalls === 0 && d.fanoutCalls === 0 && d.nativeCalls > 0)
      return { value: 1, source: CallsPerNodeSource.native };
    if (plainCalls === 0 && d.nativeCalls === 0 && d.fanoutCalls > 0) {
      let sum = 0;
      for (const b of source.batchers) if (b.mode === 'fanout') sum += b.maxConcurrentPerNode;
      if (sum > 0) return { value: sum, source: CallsPerNodeSource.fanout };
    }
    if (d.busyNodeMs > 0) return { value: d.inFlightMs / d.busyNodeMs, source: CallsPerNodeSource.observed };
    return { value: null, source: null };
  }
}
