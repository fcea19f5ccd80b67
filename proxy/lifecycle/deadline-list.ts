/**
 * Deadlines of one fixed duration (a route's total timeout, time to first byte or body gap) for
 * many requests, under a single timer. Entries join at the tail as they start, so the list stays in
 * deadline order and only its head needs a timer; leaving is O(1) from anywhere (the links live in
 * the entry itself). Nothing is allocated per request, and no timer is created or cleared per
 * request.
 *
 *   head (earliest) <-> ... <-> tail (latest)        one timer, armed for head.deadlineAt
 *
 * It must not hold entries of different durations (order would break); one list per duration.
 */
import { nowMs } from './clock.js';

/** What a list keeps of its entries: the links and the deadline live in the entry (fixed shape). */
export interface DeadlineEntry {
  /** Monotonic deadline, ms; set by `add`. */
  deadlineAt: number;
  dlPrev: DeadlineEntry | null;
  dlNext: DeadlineEntry | null;
  /** The list holding the entry, or null. */
  dlList: DeadlineList | null;
  /** Called once when the deadline passes while the entry is still in the list (it was removed). */
  onDeadline(): void;
}

export class DeadlineList {
  /** Time from `add` to the deadline, ms (> 0). */
  readonly durationMs: number;
  private head: DeadlineEntry | null = null;
  private tail: DeadlineEntry | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Entries in the list. */
  size = 0;

  constructor(durationMs: number) {
    if (!(durationMs > 0)) throw new RangeError(`deadline duration must be positive, got ${durationMs}`);
    this.durationMs = durationMs;
  }

  /** Adds `e` with the deadline now + durationMs. `e` must not be in a list. */
  add(e: DeadlineEntry, now: number): void {
    // HOT
    e.deadlineAt = now + this.durationMs;
    e.dlList = this;
    e.dlNext = null;
    e.dlPrev = this.tail;
    if (this.tail !== null) this.tail.dlNext = e;
    else this.head = e;
    this.tail = e;
    this.size++;
    if (this.timer === null) this.arm(now);
  }

  /** Removes `e` (no-op when it is not in this list). Leaves the timer as it is. */
  remove(e: DeadlineEntry): void {
    // HOT
    if (e.dlList !== this) return;
    const prev = e.dlPrev;
    const next = e.dlNext;
    if (prev !== null) prev.dlNext = next;
    else this.head = next;
    if (next !== null) next.dlPrev = prev;
    else this.tail = prev;
    e.dlPrev = e.dlNext = null;
    e.dlList = null;
    this.size--;
  }

  /**
   * Moves `e` (in this list) to the tail with the deadline now + durationMs: a body gap's deadline
   * starts again at every chunk. No-op when `e` is not in this list.
   */
  renew(e: DeadlineEntry, now: number): void {
    // HOT
    if (e.dlList !== this) return;
    if (this.tail !== e) {
      this.remove(e);
      this.add(e, now);
      return;
    }
    e.deadlineAt = now + this.durationMs;
  }

  /** Runs every entry whose deadline has passed, then arms the timer for the next one. */
  expire(now: number): void {
    this.timer = null;
    for (let e = this.head; e !== null && e.deadlineAt <= now; e = this.head) {
      this.remove(e);
      e.onDeadline();
    }
    if (this.head !== null) this.arm(now);
  }

  /** Stops the timer; entries stay (for a plan's disposal, once no request holds it). */
  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(now: number): void {
    const head = this.head!;
    // A timer does not keep the process alive: the requests' sockets do.
    this.timer = setTimeout(fireList, Math.max(0, head.deadlineAt - now), this).unref();
  }
}

function fireList(list: DeadlineList): void {
  list.expire(nowMs());
}
