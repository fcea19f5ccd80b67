/**
 * The admission queue across priority classes: one `FairQueue` per class, a strict order between
 * classes (a higher class is always dequeued first), and the choice of whom to displace when the
 * queue is full. It holds entries only; capacity, deadlines and callbacks belong to the controller.
 */
import type { AdmissionTicket } from './admission-ticket.js';
import { FairQueue, type QueueEntry } from './fair-queue.js';

/** Idle tenant records kept per class before pruning. */
const MAX_IDLE_TENANTS = 1024;

export class PriorityQueue {
  /** Entries queued across all classes. */
  size = 0;
  /** Classes by descending priority (created on first use, never removed: few distinct priorities). */
  private classes: FairQueue[] = [];
  private readonly byPriority = new Map<number, FairQueue>();

  /** Queues `e` in its ticket's class. */
  push(e: QueueEntry): void {
    // HOT
    this.classFor(e.ticket.priority).push(e);
    this.size++;
  }

  /** Removes a queued `e`, wherever it is. */
  remove(e: QueueEntry): void {
    // HOT
    this.byPriority.get(e.ticket.priority)!.remove(e);
    this.size--;
  }

  /** Removes and returns the next entry: highest non-empty class, weighted round robin inside it. */
  pop(): QueueEntry | null {
    // HOT
    const classes = this.classes;
    for (let i = 0; i < classes.length; i++) {
      const c = classes[i]!;
      if (c.size > 0) {
        this.size--;
        return c.pop();
      }
    }
    return null;
  }

  /**
   * Like `pop`, but from the tenant of the highest non-empty class furthest below its share
   * (`FairQueue.popNeediest`); null when every queued tenant of that class is at its share. A
   * lower class is never served while a higher one waits, reserved slots or not: priority is
   * strict, and the reserve decides who inside the class goes first.
   */
  popNeediest(shareUsed: (tenant: string) => number): QueueEntry | null {
    const classes = this.classes;
    for (let i = 0; i < classes.length; i++) {
      const c = classes[i]!;
      if (c.size === 0) continue;
      const e = c.popNeediest(shareUsed);
      if (e !== null) this.size--;
      return e;
    }
    return null;
  }

  /** The priority of the highest class with an entry queued; -Infinity when the queue is empty. */
  topPriority(): number {
    for (const c of this.classes) if (c.size > 0) return c.priority;
    return -Infinity;
  }

  /** True when an entry of a class above `priority` waits (strict priority: it goes first). */
  waitingAbove(priority: number): boolean {
    const classes = this.classes;
    for (let i = 0; i < classes.length; i++) {
      const c = classes[i]!;
      if (c.priority <= priority) return false;
      if (c.size > 0) return true;
    }
    return false;
  }

  /** Entries `tenant` has queued, across classes. */
  queuedBy(tenant: string): number {
    let n = 0;
    for (const c of this.classes) n += c.queuedBy(tenant);
    return n;
  }

  /**
   * The entry to evict so that `t` may queue when the queue is full, or null to shed `t` itself.
   * Only the lowest non-empty class loses an entry, and only to an arrival of a higher class, or of
   * the same class when the arrival's tenant has less queued per unit of weight than the heaviest
   * tenant (so a flooding tenant cannot lock others out of the queue). The victim is the newest
   * entry of that class's heaviest tenant (queued entries per unit of weight).
   */
  victimFor(t: AdmissionTicket): QueueEntry | null {
    let lowest: FairQueue | null = null;
    for (let i = this.classes.length - 1; i >= 0; i--) {
      const c = this.classes[i]!;
      if (c.size > 0) {
        lowest = c;
        break;
      }
    }
    if (lowest === null || lowest.priority > t.priority) return null;
    const heavy = lowest.heaviest()!;
    if (lowest.priority < t.priority) return heavy.tail;
    if (heavy.tenant === t.tenant) return null;
    const weight = Number.isFinite(t.weight) && t.weight > 0 ? t.weight : 1;
    const mine = (lowest.queuedBy(t.tenant) + 1) / weight;
    return mine < heavy.size / heavy.weight ? heavy.tail : null;
  }

  private classFor(priority: number): FairQueue {
    let c = this.byPriority.get(priority);
    if (c === undefined) {
      c = new FairQueue(priority);
      this.byPriority.set(priority, c);
      this.classes = [...this.byPriority.values()].sort((a, b) => b.priority - a.priority);
    } else if (c.size === 0) {
      c.pruneIdle(MAX_IDLE_TENANTS);
    }
    return c;
  }
}
