/**
 * One priority class of the admission queue: a FIFO per tenant, served across tenants by deficit
 * round robin (Shreedhar & Varghese) weighted by tenant weight. A tenant that sends ten times more
 * only lengthens its own FIFO; while others wait, each backlogged tenant gets service in proportion
 * to its weight. Entries can leave from anywhere (cancel, deadline, eviction) in O(1).
 *
 * ```
 *  FairQueue (priority p)            active ring (round robin over backlogged tenants)
 *  ┌──────────────────────┐        ┌───────────────────────────────────────────────┐
 *  │ current ─────────────┼──────▶ │ tenant A ⇄ tenant B ⇄ tenant C ⇄ (back to A) │
 *  └──────────────────────┘        └───────────────────────────────────────────────┘
 *  tenant A: deficit 0.4, weight 2   head ─▶ e1 ⇄ e2 ⇄ e3 ◀─ tail   (oldest … newest)
 *  tenant B: deficit 0.0, weight 1   head ─▶ e4 ◀─ tail
 *  tenant C: deficit 0.0, weight 1   head ─▶ e5 ⇄ e6 ◀─ tail
 * ```
 * On its turn a tenant's deficit grows by its weight; it is served while its head's cost fits in
 * the deficit, then the turn passes on. An emptied tenant leaves the ring and forgets its deficit.
 */
import type { AdmissionTicket } from './admission-ticket.js';

/** Deficits and costs are floats; this absorbs rounding when a cost exactly equals the deficit. */
const EPSILON = 1e-9;

/** A queued ticket, linked into its tenant's FIFO and the controller's deadline heap. */
export class QueueEntry {
  readonly ticket: AdmissionTicket;
  /** Enqueue time, ms (monotonic). */
  readonly enqueuedMs: number;
  /** When the entry is dropped if still queued, ms: min(deadline, enqueue + max wait). */
  readonly expiresMs: number;
  /** True when `expiresMs` is the ticket's own deadline (else the queue's max wait). */
  readonly byDeadline: boolean;
  /** Fair-queuing charge, from the ticket (non-finite or negative costs count as 1). */
  readonly cost: number;
  queue: TenantQueue | null = null;
  prev: QueueEntry | null = null;
  next: QueueEntry | null = null;
  /** Position in the deadline heap; -1 when not in it. */
  heapIndex = -1;

  constructor(ticket: AdmissionTicket, enqueuedMs: number, maxWaitMs: number) {
    this.ticket = ticket;
    this.enqueuedMs = enqueuedMs;
    const waitLimit = enqueuedMs + maxWaitMs;
    this.byDeadline = ticket.deadlineMs <= waitLimit;
    this.expiresMs = this.byDeadline ? ticket.deadlineMs : waitLimit;
    const c = ticket.cost;
    this.cost = Number.isFinite(c) && c >= 0 ? c : 1;
  }
}

/** One tenant's FIFO inside a class, and its place in the round robin. */
export class TenantQueue {
  readonly tenant: string;
  /** Quantum per turn, cost units (the tenant's weight). */
  weight: number;
  /** Service credit carried between turns, cost units. */
  deficit = 0;
  head: QueueEntry | null = null;
  tail: QueueEntry | null = null;
  size = 0;
  /** Neighbours in the active ring; null while the tenant has nothing queued. */
  ringPrev: TenantQueue | null = null;
  ringNext: TenantQueue | null = null;

  constructor(tenant: string, weight: number) {
    this.tenant = tenant;
    this.weight = weight;
  }
}

/** The queue of one priority class. */
export class FairQueue {
  readonly priority: number;
  /** Entries queued in this class. */
  size = 0;
  private readonly tenants = new Map<string, TenantQueue>();
  /** The tenant whose turn it is (its quantum for this turn already granted); null when empty. */
  private current: TenantQueue | null = null;
  private active = 0;

  constructor(priority: number) {
    this.priority = priority;
  }

  /** Appends `e` to its tenant's FIFO; a tenant joining the ring takes its turn after the others. */
  push(e: QueueEntry): void {
    // HOT
    const t = e.ticket;
    let q = this.tenants.get(t.tenant);
    if (q === undefined) {
      q = new TenantQueue(t.tenant, 1);
      this.tenants.set(t.tenant, q);
    }
    q.weight = Number.isFinite(t.weight) && t.weight > 0 ? t.weight : 1;
    e.queue = q;
    e.prev = q.tail;
    e.next = null;
    if (q.tail === null) q.head = e;
    else q.tail.next = e;
    q.tail = e;
    q.size++;
    this.size++;
    if (q.size === 1) this.activate(q);
  }

  /** Removes `e` (queued in this class) wherever it is. */
  remove(e: QueueEntry): void {
    // HOT
    const q = e.queue!;
    if (e.prev === null) q.head = e.next;
    else e.prev.next = e.next;
    if (e.next === null) q.tail = e.prev;
    else e.next.prev = e.prev;
    e.prev = null;
    e.next = null;
    e.queue = null;
    q.size--;
    this.size--;
    if (q.size === 0) this.deactivate(q);
  }

  /** Removes and returns the next entry in weighted round-robin order, or null when empty. */
  pop(): QueueEntry | null {
    // HOT
    if (this.size === 0) return null;
    let fruitless = 0;
    for (;;) {
      const q = this.current!;
      const head = q.head!;
      if (q.deficit + EPSILON >= head.cost) {
        q.deficit -= head.cost;
        this.remove(head);
        return head;
      }
      this.passTurn();
      if (++fruitless >= this.active) {
        this.fastForward();
        fruitless = 0;
      }
    }
  }

  /**
   * Removes and returns the head of the backlogged tenant furthest below its fair share: the
   * lowest `shareUsed` (the part of its share a tenant holds) under 1, the first in round-robin
   * order from the current one among equals; null when every tenant is at its share. Deficits are
   * left as they are: this serves the reserved slots, which only tenants under their share may
   * take, and a tenant just under its share must not take them all from one further below it.
   */
  popNeediest(shareUsed: (tenant: string) => number): QueueEntry | null {
    const start = this.current;
    if (start === null) return null;
    let best: TenantQueue | null = null;
    let least = 1;
    let q = start;
    do {
      const used = shareUsed(q.tenant);
      if (used < least) {
        least = used;
        best = q;
      }
      q = q.ringNext!;
    } while (q !== start);
    if (best === null) return null;
    const head = best.head!;
    this.remove(head);
    return head;
  }

  /** The backlogged tenant with the largest `size / weight`, or null when empty. */
  heaviest(): TenantQueue | null {
    const start = this.current;
    if (start === null) return null;
    let best = start;
    for (let q = start.ringNext!; q !== start; q = q.ringNext!) {
      if (q.size / q.weight > best.size / best.weight) best = q;
    }
    return best;
  }

  /** Entries queued by `tenant` in this class. */
  queuedBy(tenant: string): number {
    return this.tenants.get(tenant)?.size ?? 0;
  }

  /** Drops idle tenant records when there are many (tenant names come from a bounded table). */
  pruneIdle(max: number): void {
    if (this.tenants.size <= max) return;
    for (const [name, q] of this.tenants) if (q.size === 0) this.tenants.delete(name);
  }

  private activate(q: TenantQueue): void {
    const cur = this.current;
    this.active++;
    if (cur === null) {
      q.ringPrev = q;
      q.ringNext = q;
      this.current = q;
      q.deficit = q.weight;
      return;
    }
    // Insert just before the current tenant: last to be visited in this round.
    const prev = cur.ringPrev!;
    q.ringPrev = prev;
    q.ringNext = cur;
    prev.ringNext = q;
    cur.ringPrev = q;
    q.deficit = 0;
  }

  private deactivate(q: TenantQueue): void {
    this.active--;
    q.deficit = 0;
    const next = q.ringNext!;
    if (next === q) {
      this.current = null;
    } else {
      const prev = q.ringPrev!;
      prev.ringNext = next;
      next.ringPrev = prev;
      if (this.current === q) {
        this.current = next;
        next.deficit += next.weight;
      }
    }
    q.ringPrev = null;
    q.ringNext = null;
  }

  private passTurn(): void {
    const next = this.current!.ringNext!;
    this.current = next;
    next.deficit += next.weight;
  }

  /**
   * A whole round served nobody (costs larger than quanta): grant every tenant the rounds that the
   * closest one still needs, minus one, at once instead of looping through them.
   */
  private fastForward(): void {
    const start = this.current!;
    let rounds = Infinity;
    let q = start;
    do {
      const need = Math.ceil((q.head!.cost - q.deficit) / q.weight);
      if (need < rounds) rounds = need;
      q = q.ringNext!;
    } while (q !== start);
    if (!(rounds > 1)) return;
    q = start;
    do {
      q.deficit += (rounds - 1) * q.weight;
      q = q.ringNext!;
    } while (q !== start);
  }
}
