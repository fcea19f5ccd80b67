/**
 * Per-pool admission control: at most `limit` requests in flight (max per node × nodes, or less
 * when the adaptive limit says so); beyond that a bounded queue with a maximum wait and per-request
 * deadlines; strict priority between classes; weighted fair queuing across tenants within a class.
 * Every decision is synchronous and O(log n); a rejection is immediate, a queued request is either
 * admitted or dropped by its expiry timer, never forgotten. It does not dispatch requests itself.
 *
 * ```
 *          offer(ticket)
 *               │ slot free and nobody queued ─────────────────────────────▶ 'admitted'
 *               ▼
 *   ┌─ queue (≤ maxQueue entries) ─────────────────────────────────┐  full: shed the arrival, or
 *   │ class 10: FairQueue  A: e1 e2   B: e3                        │  evict the newest entry of the
 *   │ class  0: FairQueue  C: e4 e5 e6   D: e7                     │  heaviest tenant of a lower
 *   └──────────────────────────────────────────────────────────────┘  class (or of the same class
 *     ▲ deadline heap (one timer): drops entries at expiry            when the arrival is fairer)
 *     │
 *   release(ticket) ─▶ slot freed ─▶ pop: highest class, then weighted round robin ─▶ onAdmitted()
 * ```
 */
import { nowMs } from '../lifecycle/clock.js';
import type { Logger } from '../runtime/logger.js';
import { AdaptiveLimit, type AdaptiveLimitOptions, type SharedAdaptiveState } from './adaptive-limit.js';
import { countRejection, newAdmissionCounters, type AdmissionCounters } from './admission-counters.js';
import {
  AdmissionRejectReason,
  AdmissionRejection,
  type AdmissionTicket,
  type OfferResult,
} from './admission-ticket.js';
import { DeadlineHeap } from './deadline-heap.js';
import { QueueEntry } from './fair-queue.js';
import { PriorityQueue } from './priority-queue.js';

/** Options of `AdmissionController` (YAML: a pool's `admission` section). */
export interface AdmissionOptions {
  /** Requests in flight per node, >= 1. Default 64. */
  maxInFlightPerNode?: number;
  /** Nodes in the pool (capacity = per node × nodes). Default 1; update with `setCapacity`. */
  nodes?: number;
  /** Queued requests across all classes, >= 0 (0: reject as soon as the pool is full). Default 1024. */
  maxQueue?: number;
  /** Longest a request may wait in the queue, ms. Default 10 000. */
  maxWaitMs?: number;
  /** Gradient limit on top of the static capacity; null or absent: off. */
  adaptive?: AdaptiveLimitOptions | null;
  /** Service time assumed for retry estimates before any request completed, ms. Default 1000. */
  initialServiceTimeMs?: number;
  /** Ceiling of suggested retry delays, ms. Default 30 000. */
  maxRetryAfterMs?: number;
  /** Monotonic clock, ms. Default `performance.now()`. */
  clock?: () => number;
  /** Arm a timer for queue expiries. Default true; tests with a manual clock call `expire()`. */
  timers?: boolean;
  /** Receives errors thrown by ticket callbacks (a bug in the caller), with the tenant name. */
  logger?: Logger;
  /**
   * Slots per node held back for tenants under their fair share: a tenant already holding its
   * weighted share of the limit (among the active tenants: with a request in flight or queued, or
   * seen within `reserveWindowMs`) may fill the pool only up to `limit - reserve`, so a light
   * tenant's arrival finds a slot at once instead of waiting for one to free. A tenant alone may
   * use every slot. Default 0 (off).
   */
  reservePerNode?: number;
  /** How long a tenant counts as active after its last offer or release, ms. Default 2000. */
  reserveWindowMs?: number;
  /**
   * With worker threads (`server.workers`): the pool's record in the threads' shared table, whose
   * cells hold the requests in flight, the requests queued and a wake-up generation of every
   * thread's controller of the pool. The limit and `maxQueue` then count every thread; each thread
   * queues its own requests and is woken when another frees a slot. With `adaptive`, give
   * `sharedAdaptive` too; not with `reservePerNode` (the main thread's controller of such a pool
   * decides for every thread: runtime/admission-relay.ts). Absent: this thread alone.
   */
  shared?: { cells: Int32Array; cell: number; ledger?: Int32Array | null } | null;
  /**
   * With worker threads and `adaptive`: the limit's state in the threads' shared table, so that one
   * limit learns from every thread's requests and every thread enforces it.
   */
  sharedAdaptive?: SharedAdaptiveState | null;
}

/** `Atomics.waitAsync` (in Node since 16; not in this TypeScript lib's types). */
interface AtomicsWithWaitAsync {
  waitAsync(
    a: Int32Array,
    index: number,
    value: number,
    timeoutMs: number,
  ): { async: boolean; value: Promise<unknown> | string };
}

/** Longest a thread with queued requests waits between looks at the shared slots, ms. */
const WAKE_POLL_MS = 250;

/** Cells of a shared admission record (see `AdmissionOptions.shared`). */
const SHARED_IN_FLIGHT = 0;
const SHARED_QUEUED = 1;
const SHARED_WAKE = 2;

/** A tenant's use of the pool, tracked only while `reservePerNode` > 0. */
interface TenantUse {
  /** Requests of the tenant holding a slot. */
  inFlight: number;
  /** Fair-share weight (> 0). */
  weight: number;
  /** Last offer, admission or release, ms (monotonic). */
  seenMs: number;
  /** Highest priority class of its offers within the window: the reserve is held for it only against that class or lower. */
  priority: number;
}

/** Weight of each completed request in the service-time average. */
const SERVICE_EWMA_ALPHA = 0.1;

export class AdmissionController {
  readonly counters: AdmissionCounters = newAdmissionCounters();
  /** The adaptive limit, or null when off. */
  readonly adaptive: AdaptiveLimit | null;
  /** Requests admitted and not yet released. */
  inFlight = 0;
  /** Static capacity, requests (per node × the nodes counted, see `countedNodes`). */
  private capacity = 0;
  /** Requests in flight per node (config). */
  private perNode: number;
  /** Nodes in the pool's config. */
  private nodes: number;
  /** Nodes that take traffic now (`setServingNodes`); -1 until told, then every node counts. */
  private serving = -1;
  /** Effective limit, requests: min(capacity, adaptive limit). */
  private effectiveLimit = 0;
  private readonly adaptiveMaxFixed: boolean;
  /** The adaptive limit's state is the threads' (other threads move it: read it before deciding). */
  private readonly adaptiveShared: boolean;
  private maxQueue: number;
  private maxWaitMs: number;
  private readonly maxRetryAfterMs: number;
  /** Average time from admission to release, ms. */
  private serviceTimeMs: number;
  /** Sum of the admission times of the slots held, ms: their mean age is `now - sum / inFlight`. */
  private heldSinceSumMs = 0;
  private readonly clock: () => number;
  private readonly timers: boolean;
  private readonly logger: Logger | null;
  private readonly queue = new PriorityQueue();
  private readonly queuedEntries = new Map<AdmissionTicket, QueueEntry>();
  private readonly heap = new DeadlineHeap();
  private timer: NodeJS.Timeout | null = null;
  /** Expiry the armed timer is for, ms. */
  private timerAtMs = Infinity;
  private readonly onTimer: () => void;
  private draining = false;
  private closed = false;
  private reservePerNode: number;
  private reserveWindowMs: number;
  /** Slots held back for tenants under their share (per node × nodes, below the limit). */
  private reserved = 0;
  private readonly use = new Map<string, TenantUse>();
  /**
   * Slots per unit of weight for the decision in progress: the limit over the weight of the active
   * tenants (see `shareScale`). A tenant is under its share while `inFlight < scale × weight`.
   */
  private scale = Infinity;
  /** `shareUsed` bound once (the queue calls it back). */
  private readonly shareUsedFn: (tenant: string) => number;
  /** The shared record's cells and offset (worker threads), or null. */
  private readonly sharedCells: Int32Array | null;
  private readonly sharedAt: number;
  /** A worker thread's ledger of what it holds of the shared counts (shared-table.ts), or null. */
  private readonly ledger: Int32Array | null;
  /** True while this thread waits to be woken by another's release (worker threads). */
  private waiting = false;
  /** `drain`, then wait again if requests are still queued: what a wake-up runs. */
  private readonly onWake: () => void;
  /** `drain` from a microtask (a wait that is pending stays pending). */
  private readonly drainSoon = (): void => this.drain();

  constructor(options: AdmissionOptions = {}) {
    this.maxQueue = options.maxQueue ?? 1024;
    this.maxWaitMs = options.maxWaitMs ?? 10_000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 30_000;
    this.serviceTimeMs = options.initialServiceTimeMs ?? 1000;
    this.clock = options.clock ?? nowMs;
    this.timers = options.timers ?? true;
    this.logger = options.logger ?? null;
    if (!(this.maxQueue >= 0)) throw new Error('admission.max_queue must be >= 0');
    if (!(this.maxWaitMs >= 0)) throw new Error('admission.max_wait_ms must be >= 0');
    this.perNode = options.maxInFlightPerNode ?? 64;
    this.nodes = options.nodes ?? 1;
    this.capacity = checkedCapacity(this.perNode, this.nodes);
    this.reservePerNode = options.reservePerNode ?? 0;
    this.reserveWindowMs = options.reserveWindowMs ?? 2000;
    this.shareUsedFn = (tenant) => this.shareUsed(tenant);
    const a = options.adaptive ?? null;
    this.adaptiveMaxFixed = a?.maxLimit !== undefined;
    this.adaptive =
      a === null
        ? null
        : new AdaptiveLimit({ ...a, maxLimit: a.maxLimit ?? this.capacity }, options.sharedAdaptive ?? null);
    this.adaptiveShared = this.adaptive !== null && (options.sharedAdaptive ?? null) !== null;
    this.effectiveLimit = this.computeLimit();
    this.reserved = this.computeReserve();
    this.onTimer = () => {
      this.timer = null;
      this.timerAtMs = Infinity;
      this.expire();
    };
    const shared = options.shared ?? null;
    this.sharedCells = shared?.cells ?? null;
    this.sharedAt = shared?.cell ?? 0;
    this.ledger = shared?.ledger ?? null;
    if (shared !== null && this.reservePerNode > 0)
      throw new Error('admission shared across worker threads takes no reserve_per_node');
    if (shared !== null && this.adaptive !== null && !this.adaptiveShared)
      throw new Error('admission shared across worker threads needs the adaptive limit shared too');
    this.onWake = () => {
      this.waiting = false;
      this.drain();
    };
  }

  /** Requests in flight in every thread (this thread's `inFlight` when not shared). */
  get inFlightAll(): number {
    const c = this.sharedCells;
    return c === null ? this.inFlight : Atomics.load(c, this.sharedAt + SHARED_IN_FLIGHT);
  }

  /** Requests queued in every thread (`queued` when not shared). */
  get queuedAll(): number {
    const c = this.sharedCells;
    return c === null ? this.queuedEntries.size : Atomics.load(c, this.sharedAt + SHARED_QUEUED);
  }

  /**
   * Takes a slot of the limit: this thread's count (`inFlight`), and with worker threads the shared
   * one, by compare-and-swap so that threads never take more than the limit between them.
   */
  private takeSlot(): boolean {
    // HOT
    const c = this.sharedCells;
    if (c === null) {
      if (this.inFlight >= this.effectiveLimit) return false;
    } else {
      const at = this.sharedAt + SHARED_IN_FLIGHT;
      for (;;) {
        const n = Atomics.load(c, at);
        if (n >= this.effectiveLimit) return false;
        if (Atomics.compareExchange(c, at, n, n + 1) === n) break;
      }
      if (this.ledger !== null) this.ledger[at]!++;
    }
    this.inFlight++;
    return true;
  }

  /**
   * Takes a place in the queue if `maxQueue` allows one: with worker threads in the shared count,
   * by compare-and-swap, so that the threads never queue more than `maxQueue` between them.
   */
  private tryQueueSlot(): boolean {
    const c = this.sharedCells;
    if (c === null) return this.queuedEntries.size < this.maxQueue;
    const at = this.sharedAt + SHARED_QUEUED;
    for (;;) {
      const n = Atomics.load(c, at);
      if (n >= this.maxQueue) return false;
      if (Atomics.compareExchange(c, at, n, n + 1) === n) {
        if (this.ledger !== null) this.ledger[at]!++;
        return true;
      }
    }
  }

  /** Gives back a slot `takeSlot` took for a request that did not get it after all. */
  private giveSlot(): void {
    this.inFlight--;
    const c = this.sharedCells;
    if (c === null) return;
    const at = this.sharedAt + SHARED_IN_FLIGHT;
    Atomics.sub(c, at, 1);
    if (this.ledger !== null) this.ledger[at]!--;
  }

  /** Counts a request entering (1) or leaving (-1) this thread's queue in the shared record. */
  private countQueued(d: 1 | -1): void {
    const c = this.sharedCells;
    if (c === null) return;
    const at = this.sharedAt + SHARED_QUEUED;
    Atomics.add(c, at, d);
    if (this.ledger !== null) this.ledger[at]! += d;
  }

  /**
   * Worker threads: after a slot was freed here, wakes the threads that queue requests if a slot is
   * still free (this thread's queue did not take it).
   */
  private wakeOthers(): void {
    const c = this.sharedCells;
    if (c === null) return;
    const at = this.sharedAt;
    if (Atomics.load(c, at + SHARED_QUEUED) <= this.queuedEntries.size) return;
    if (this.adaptiveShared) this.effectiveLimit = this.computeLimit();
    if (Atomics.load(c, at + SHARED_IN_FLIGHT) >= this.effectiveLimit) return;
    Atomics.add(c, at + SHARED_WAKE, 1);
    Atomics.notify(c, at + SHARED_WAKE);
  }

  /** Worker threads: while this thread has queued requests, waits for another thread's wake-up. */
  private awaitWake(): void {
    const c = this.sharedCells;
    if (c === null || this.waiting || this.queuedEntries.size === 0 || this.closed) return;
    const at = this.sharedAt + SHARED_WAKE;
    // With a timeout: a wake-up lost to a race costs at most that long, and nothing waits forever.
    const w = (Atomics as unknown as AtomicsWithWaitAsync).waitAsync(
      c,
      at,
      Atomics.load(c, at),
      WAKE_POLL_MS,
    );
    this.waiting = true;
    if (w.async) void (w.value as Promise<unknown>).then(this.onWake);
    else queueMicrotask(this.onWake);
  }

  /**
   * Worker threads' requests queued or holding a slot here (pools with a reserve, decided by the
   * main thread: runtime/admission-relay.ts), counted by the relay; `close` waits for them.
   */
  private remoteHeld = 0;
  private closeWhenIdle = false;

  /** A worker thread's request entered this controller (the relay counts it). */
  holdRemote(): void {
    this.remoteHeld++;
  }

  /**
   * A worker thread's request left this controller; a close that waited for it happens next (in a
   * microtask: the request may leave from inside a decision of this controller).
   */
  letGoRemote(): void {
    if (--this.remoteHeld === 0 && this.closeWhenIdle) {
      this.closeWhenIdle = false;
      queueMicrotask(this.closeDeferred);
    }
  }

  private readonly closeDeferred = (): void => this.close();

  /** Requests allowed in flight now. */
  get limit(): number {
    if (this.adaptiveShared) this.effectiveLimit = this.computeLimit();
    return this.effectiveLimit;
  }

  /** Requests waiting in the queue. */
  get queued(): number {
    return this.queuedEntries.size;
  }

  /** Average admission-to-release time, ms (the basis of retry estimates). */
  get averageServiceTimeMs(): number {
    return this.serviceTimeMs;
  }

  /**
   * Presents a request. Returns `'admitted'` (a slot is held: dispatch now, `release` when done),
   * `'queued'` (exactly one of `onAdmitted` / `onRejected` follows, unless `cancel` comes first) or
   * an `AdmissionRejection` (nothing held; reply 503 with its retry delay). Never blocks. A ticket
   * is offered once; offer a new one for a retry.
   */
  offer(t: AdmissionTicket): OfferResult {
    // HOT
    const now = this.clock();
    if (this.closed) return this.rejectNow(AdmissionRejectReason.closed);
    if (t.deadlineMs <= now) return this.rejectNow(AdmissionRejectReason.deadline);
    const u = this.reservePerNode > 0 ? this.touch(t, now) : null;
    if (this.adaptiveShared) this.effectiveLimit = this.computeLimit();
    if (this.inFlight < this.effectiveLimit && this.mayTakeNow(t, now) && this.takeSlot()) {
      t.slotSinceMs = now;
      t.slotOwner = this;
      this.heldSinceSumMs += now;
      if (u !== null) u.inFlight++;
      this.counters.admittedImmediately++;
      return 'admitted';
    }
    let victim: QueueEntry | null = null;
    if (!this.tryQueueSlot()) {
      victim = this.maxQueue === 0 ? null : this.queue.victimFor(t);
      if (victim === null) return this.rejectNow(AdmissionRejectReason.queueFull);
      this.unqueue(victim);
      // The arrival takes the victim's place in the shared count.
      this.countQueued(1);
    }
    const e = new QueueEntry(t, now, this.maxWaitMs);
    this.queue.push(e);
    this.queuedEntries.set(t, e);
    this.heap.push(e);
    this.counters.queued++;
    if (e.expiresMs < this.timerAtMs) this.armTimer();
    if (victim !== null) this.rejectQueued(victim, AdmissionRejectReason.evicted);
    if (this.sharedCells !== null) {
      // A slot another thread freed before this request was queued there is taken by a drain.
      this.awaitWake();
      if (this.inFlightAll < this.effectiveLimit) queueMicrotask(this.drainSoon);
    }
    return 'queued';
  }

  /**
   * Frees the slot of an admitted request and admits the next queued one(s). `latencyMs` feeds the
   * adaptive limit (default: the time since admission). Returns false, changing nothing, for a
   * ticket that does not hold a slot (never admitted, or already released).
   */
  release(t: AdmissionTicket, latencyMs?: number): boolean {
    // HOT
    if (t.slotOwner !== this) return false;
    const admittedAt = t.slotSinceMs;
    t.slotOwner = null;
    const inFlightBefore = this.inFlight;
    this.inFlight--;
    const c = this.sharedCells;
    if (c !== null) Atomics.sub(c, this.sharedAt + SHARED_IN_FLIGHT, 1);
    // Back at 0 with no slot held: rounding in the sum does not build up over a long run.
    this.heldSinceSumMs = this.inFlight === 0 ? 0 : this.heldSinceSumMs - admittedAt;
    const now = this.clock();
    if (this.reservePerNode > 0) {
      const u = this.use.get(t.tenant);
      if (u !== undefined && u.inFlight > 0) {
        u.inFlight--;
        u.seenMs = now;
      }
    }
    this.counters.released++;
    const service = now - admittedAt;
    this.serviceTimeMs += (service - this.serviceTimeMs) * SERVICE_EWMA_ALPHA;
    if (this.adaptive !== null) {
      // With threads, the limit learns from the pool's load in all of them.
      const before = c === null ? inFlightBefore : Atomics.load(c, this.sharedAt + SHARED_IN_FLIGHT) + 1;
      this.adaptive.observe(latencyMs ?? service, before);
      this.effectiveLimit = this.computeLimit();
      this.reserved = this.computeReserve();
    }
    this.drain();
    this.wakeOthers();
    return true;
  }

  /**
   * Withdraws a queued request whose client went away; no callback follows. Returns false for a
   * ticket that is not queued (already admitted: `release` it; or already rejected).
   */
  cancel(t: AdmissionTicket): boolean {
    const e = this.queuedEntries.get(t);
    if (e === undefined) return false;
    this.unqueue(e);
    this.counters.cancelled++;
    return true;
  }

  /**
   * New queue bounds (reload), applied in place so queued and admitted requests keep their places
   * and slots. A smaller queue keeps what it holds (new arrivals see the new bound); a new maximum
   * wait applies to requests queued from now on.
   */
  setQueueLimits(maxQueue: number, maxWaitMs: number): void {
    if (!(maxQueue >= 0)) throw new Error('admission.max_queue must be >= 0');
    if (!(maxWaitMs >= 0)) throw new Error('admission.max_wait_ms must be >= 0');
    this.maxQueue = maxQueue;
    this.maxWaitMs = maxWaitMs;
  }

  /**
   * New static capacity and reserve (reload, nodes added or removed). Admits queued requests if the
   * pool grew or its reserve shrank.
   */
  setCapacity(
    maxInFlightPerNode: number,
    nodes: number,
    reservePerNode = this.reservePerNode,
    reserveWindowMs = this.reserveWindowMs,
  ): void {
    checkedCapacity(maxInFlightPerNode, nodes);
    this.perNode = maxInFlightPerNode;
    this.nodes = nodes;
    this.reservePerNode = reservePerNode;
    this.reserveWindowMs = reserveWindowMs;
    if (reservePerNode <= 0) this.use.clear();
    this.resize();
  }

  /**
   * The pool's nodes that take traffic now (in rotation, not drained, weight above 0), from its
   * health tracker on every change. Capacity is the per-node limit times these, so an outage of
   * half the pool does not put twice the per-node limit on the other half: the excess waits here,
   * under deadlines and priorities. With none serving, every configured node counts again: the
   * requests then go on at once to find no node (a 503, or a fallback pool) instead of waiting in
   * the queue for nodes that may not come back.
   */
  setServingNodes(serving: number): void {
    if (serving === this.serving) return;
    this.serving = serving;
    this.resize();
  }

  /** Nodes the capacity counts: those serving, or every configured node when none is (or unknown). */
  private countedNodes(): number {
    return this.serving > 0 ? Math.min(this.serving, this.nodes) : this.nodes;
  }

  /** Recomputes capacity, limit and reserve after a change of nodes or settings; admits queued requests that now fit. */
  private resize(): void {
    this.capacity = this.perNode * this.countedNodes();
    // The adaptive limit's ceiling follows the configured pool, not the nodes serving now: the
    // limit is the lower of the two anyway, and its estimate must not be cut by a brief outage.
    if (this.adaptive !== null && !this.adaptiveMaxFixed) {
      this.adaptive.maxLimit = Math.max(this.adaptive.minLimit, this.perNode * this.nodes);
      this.adaptive.capEstimate(this.adaptive.maxLimit);
    }
    this.effectiveLimit = this.computeLimit();
    this.reserved = this.computeReserve();
    this.drain();
  }

  /**
   * Drops every queued request whose expiry (deadline or max wait) has come. Runs from the expiry
   * timer; tests with a manual clock call it directly.
   */
  expire(): void {
    const now = this.clock();
    for (let e = this.heap.peek(); e !== null && e.expiresMs <= now; e = this.heap.peek()) {
      this.unqueue(e);
      this.rejectQueued(
        e,
        e.byDeadline ? AdmissionRejectReason.deadline : AdmissionRejectReason.queueTimeout,
      );
    }
    this.armTimer();
  }

  /** Rejects everything queued and every later offer (`closed`). Admitted requests may still be released. */
  close(): void {
    // Requests other threads hold or queue here (admission-relay.ts) keep the controller open, as a
    // plan keeps a removed pool's controller for its own requests; it closes after the last.
    if (this.remoteHeld > 0) {
      this.closeWhenIdle = true;
      return;
    }
    this.closed = true;
    for (const e of [...this.queuedEntries.values()]) {
      this.unqueue(e);
      this.rejectQueued(e, AdmissionRejectReason.closed);
    }
    this.armTimer();
  }

  /**
   * The suggested retry delay for a request that would now stand behind `ahead` others, ms: the
   * service time over the slots, times the places ahead. The service time is the moving average of
   * finished requests, or twice the mean age of the requests holding slots when that is longer (in
   * a steady state the mean age is half the service time): after a run of short requests, long
   * ones in flight raise the estimate before any of them finishes.
   */
  retryAfterMs(ahead: number): number {
    const held = this.inFlight;
    const age = held > 0 ? this.clock() - this.heldSinceSumMs / held : 0;
    const service = 2 * age > this.serviceTimeMs ? 2 * age : this.serviceTimeMs;
    const ms = (service * (ahead + 1)) / Math.max(1, this.effectiveLimit);
    return ms < 1 ? 1 : ms > this.maxRetryAfterMs ? this.maxRetryAfterMs : Math.ceil(ms);
  }

  private drain(): void {
    // HOT
    if (this.draining) return;
    this.draining = true;
    let scaled = false;
    if (this.adaptiveShared) this.effectiveLimit = this.computeLimit();
    try {
      const shared = this.sharedCells !== null;
      while (this.queuedEntries.size > 0 && this.inFlightAll < this.effectiveLimit) {
        // Worker threads: the slot is taken before an entry leaves the queue (another thread may
        // take it between the check and here).
        if (shared && !this.takeSlot()) break;
        let e: QueueEntry | null;
        if (this.reserved > 0 && this.inFlight >= this.effectiveLimit - this.reserved) {
          // In the reserved slots only tenants under their fair share are served. The tenants
          // admitted here were active already (queued), so one scale serves the whole pass.
          if (!scaled) {
            this.scale = this.shareScale(this.clock());
            scaled = true;
          }
          e = this.queue.popNeediest(this.shareUsedFn);
          // Nobody queued in the top class is under its share: the reserve is held only for an
          // active tenant under its share that may take it (of that class or above); a reserve
          // for lower classes, which may not go first, would only stay idle.
          if (e === null && !this.reserveWanted(this.queue.topPriority())) e = this.queue.pop();
        } else {
          e = this.queue.pop();
        }
        if (e === null) {
          if (shared) this.giveSlot();
          break;
        }
        this.queuedEntries.delete(e.ticket);
        this.heap.remove(e);
        this.countQueued(-1);
        const now = this.clock();
        if (e.expiresMs <= now) {
          if (shared) this.giveSlot();
          // The timer has not fired yet, but a late request is not served.
          this.rejectQueued(
            e,
            e.byDeadline ? AdmissionRejectReason.deadline : AdmissionRejectReason.queueTimeout,
          );
          continue;
        }
        if (!shared) this.inFlight++;
        e.ticket.slotSinceMs = now;
        e.ticket.slotOwner = this;
        this.heldSinceSumMs += now;
        if (this.reservePerNode > 0) this.touch(e.ticket, now).inFlight++;
        this.counters.admittedFromQueue++;
        try {
          e.ticket.onAdmitted();
        } catch (err) {
          this.callbackFailed(e.ticket, 'onAdmitted', err);
        }
      }
    } finally {
      this.draining = false;
    }
    this.armTimer();
    this.awaitWake();
  }

  private unqueue(e: QueueEntry): void {
    if (e.queue !== null) this.queue.remove(e);
    if (this.queuedEntries.delete(e.ticket)) this.countQueued(-1);
    this.heap.remove(e);
  }

  private rejectNow(reason: AdmissionRejectReason): AdmissionRejection {
    countRejection(this.counters, reason);
    return new AdmissionRejection(reason, this.retryAfterMs(this.queuedEntries.size));
  }

  private rejectQueued(e: QueueEntry, reason: AdmissionRejectReason): void {
    countRejection(this.counters, reason);
    const rejection = new AdmissionRejection(reason, this.retryAfterMs(this.queuedEntries.size));
    try {
      e.ticket.onRejected(rejection);
    } catch (err) {
      this.callbackFailed(e.ticket, 'onRejected', err);
    }
  }

  /**
   * Whether an arrival may take a free slot now, ahead of the queue. With nobody queued: yes,
   * except that the reserved slots are for tenants under their share. With a queue (whose heads
   * are then all blocked by the reserve, or drain would have served them): only a tenant under its
   * share with nothing queued of its own.
   */
  private mayTakeNow(t: AdmissionTicket, now: number): boolean {
    // With worker threads, requests queued in any thread go first.
    if (this.reserved === 0) return this.queuedAll === 0;
    const inReserve = this.inFlight >= this.effectiveLimit - this.reserved;
    if (!inReserve) return this.queuedEntries.size === 0;
    if (this.queuedEntries.size > 0 && this.queue.queuedBy(t.tenant) > 0) return false;
    // A reserved slot goes to a tenant under its share, but never ahead of a higher class waiting.
    if (this.queuedEntries.size > 0 && this.queue.waitingAbove(t.priority)) return false;
    this.scale = this.shareScale(now);
    return this.underShare(t.tenant) || !this.reserveWanted(t.priority);
  }

  /**
   * True when an active tenant of class `priority` or above is under its share at the current
   * `scale` (the reserve is kept for it). Call after `shareScale`, which forgot inactive tenants.
   */
  private reserveWanted(priority: number): boolean {
    for (const u of this.use.values()) {
      if (u.priority >= priority && u.inFlight < this.scale * u.weight) return true;
    }
    return false;
  }

  /**
   * Slots per unit of weight: the limit over the summed weight of the active tenants, those with a
   * request in flight or queued, or seen within the window. Forgets the others. One pass over the
   * tenants, once per decision; a tenant alone gets a scale that lets it use every slot.
   */
  private shareScale(now: number): number {
    let weights = 0;
    for (const [name, u] of this.use) {
      if (u.inFlight > 0 || now - u.seenMs <= this.reserveWindowMs || this.queue.queuedBy(name) > 0) {
        weights += u.weight;
      } else {
        this.use.delete(name);
      }
    }
    return weights > 0 ? this.effectiveLimit / weights : Infinity;
  }

  /** True when `tenant` holds fewer slots than its weighted share at the current `scale`. */
  private underShare(tenant: string): boolean {
    return this.shareUsed(tenant) < 1;
  }

  /** The part of its weighted share at the current `scale` that `tenant` holds (under 1: under it). */
  private shareUsed(tenant: string): number {
    const u = this.use.get(tenant);
    return u === undefined ? 0 : u.inFlight / (this.scale * u.weight);
  }

  /** Marks a tenant active now; returns its record. */
  private touch(t: AdmissionTicket, now: number): TenantUse {
    let u = this.use.get(t.tenant);
    if (u === undefined) {
      u = { inFlight: 0, weight: 1, seenMs: now, priority: t.priority };
      this.use.set(t.tenant, u);
    }
    u.weight = Number.isFinite(t.weight) && t.weight > 0 ? t.weight : 1;
    // The highest class the tenant used within the window: its batch items (the lowest class)
    // must not stop the reserve being held for its interactive traffic.
    if (now - u.seenMs > this.reserveWindowMs || t.priority > u.priority) u.priority = t.priority;
    u.seenMs = now;
    return u;
  }

  private computeReserve(): number {
    // Never the whole limit: a tenant at its share always keeps at least one slot.
    return Math.max(0, Math.min(this.reservePerNode * this.countedNodes(), this.effectiveLimit - 1));
  }

  private computeLimit(): number {
    return this.adaptive === null ? this.capacity : Math.min(this.capacity, this.adaptive.limit);
  }

  private armTimer(): void {
    if (!this.timers) return;
    const next = this.heap.peek();
    if (next === null) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.timerAtMs = Infinity;
      return;
    }
    if (this.timer !== null && this.timerAtMs <= next.expiresMs) return;
    if (this.timer !== null) clearTimeout(this.timer);
    // +1: Node timers have millisecond granularity and may fire a fraction early.
    const delay = Math.max(0, Math.ceil(next.expiresMs - this.clock()) + 1);
    // Not unref'd: a queued request is owed an answer even if nothing else keeps the process alive.
    this.timer = setTimeout(this.onTimer, delay);
    this.timerAtMs = next.expiresMs;
  }

  private callbackFailed(t: AdmissionTicket, which: string, err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    this.logger?.error(`admission: ${which} of a request of tenant ${t.tenant} threw: ${why}`);
  }
}

function checkedCapacity(perNode: number, nodes: number): number {
  if (!Number.isInteger(perNode) || perNode < 1) {
    throw new Error(`admission.max_in_flight_per_node must be an integer >= 1, got ${String(perNode)}`);
  }
  if (!Number.isInteger(nodes) || nodes < 0)
    throw new Error(`admission: node count must be an integer >= 0, got ${String(nodes)}`);
  return perNode * nodes;
}
