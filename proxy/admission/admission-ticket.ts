/**
 * The contract between a request and its pool's admission controller: the ticket the request
 * presents (who, how urgent, until when, at what cost) and the rejection it may receive. The
 * request object itself implements the ticket, so admission allocates no closure per request.
 */

/**
 * What a request presents to `AdmissionController.offer`. Implemented by the per-request object
 * (the fields are read at offer time; callbacks run at most once, and never both).
 */
export interface AdmissionTicket {
  /** Tenant name: fair queuing shares are per tenant inside a priority class. */
  readonly tenant: string;
  /** Tenant's fair-share weight (> 0): over a backlog, service is proportional to weight. */
  readonly weight: number;
  /** Priority class (higher first; a lower class is shed first). */
  readonly priority: number;
  /** Absolute deadline on the monotonic clock (`performance.now()` ms); `Infinity` for none. */
  readonly deadlineMs: number;
  /**
   * Fair-queuing charge of this request, in any unit used consistently by the pool's callers
   * (1 per request for request fairness, the token estimate for token fairness). Every admitted
   * ticket occupies one in-flight slot whatever its cost.
   */
  readonly cost: number;
  /**
   * Kept by the controller: when the ticket's slot was granted (monotonic ms; -1 before, kept after
   * release for the request's own accounting) and which controller it holds a slot of (null when
   * none). They live on
   * the ticket rather than in a Map of the controller: a Map entry, even deleted, kept request
   * objects alive long enough to be promoted to the old generation, which doubled the bytes
   * promoted per request. Start at -1 and null.
   */
  slotSinceMs: number;
  slotOwner: object | null;
  /** A queued ticket got a slot: dispatch now. Not called when `offer` itself returned `admitted`. */
  onAdmitted(): void;
  /** A queued ticket was dropped (deadline, queue wait, eviction, shutdown). Not called for `offer`'s own rejections. */
  onRejected(rejection: AdmissionRejection): void;
}

/** Why admission turned a request away. */
export const AdmissionRejectReason = {
  /** The queue was full and the arrival was the one to shed. 503 overloaded. */
  queueFull: 'queue-full',
  /** A queued request displaced by a higher-priority (or fairer) arrival. 503 overloaded. */
  evicted: 'evicted',
  /** Waited `max_wait_ms` in the queue without a slot. 503 overloaded. */
  queueTimeout: 'queue-timeout',
  /** The request's own deadline passed before it could be dispatched. 503 deadline exceeded. */
  deadline: 'deadline',
  /** The controller was closed (pool removed, shutdown). 503. */
  closed: 'closed',
} as const;
export type AdmissionRejectReason = (typeof AdmissionRejectReason)[keyof typeof AdmissionRejectReason];

/** A rejection with a suggested retry delay (send as `retry-after` / `retry-after-ms`). */
export class AdmissionRejection {
  readonly reason: AdmissionRejectReason;
  /** Suggested wait before retrying, ms, from the observed service time and queue length. >= 1. */
  readonly retryAfterMs: number;

  constructor(reason: AdmissionRejectReason, retryAfterMs: number) {
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/** What `offer` returns: admitted now, queued (a callback follows), or rejected now. */
export type OfferResult = 'admitted' | 'queued' | AdmissionRejection;

/**
 * The absolute deadline of a request arriving at `nowMs`: `nowMs` plus the budget in the
 * `x-request-deadline-ms` header (a positive integer of milliseconds from now) when present and
 * valid, else plus `defaultMs` (`Infinity`: no deadline); budgets are capped at `maxMs`.
 *
 * @example
 * ticket.deadlineMs = requestDeadline(session.header('x-request-deadline-ms'), nowMs(), 30_000);
 */
export function requestDeadline(
  header: string | undefined,
  nowMs: number,
  defaultMs = Infinity,
  maxMs = Infinity,
): number {
  let budget = defaultMs;
  if (header !== undefined && /^\d{1,12}$/.test(header)) {
    const v = Number(header);
    if (v > 0) budget = v;
  }
  return nowMs + (budget > maxMs ? maxMs : budget);
}
