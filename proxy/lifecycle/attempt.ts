/**
 * One upstream attempt of a request: the dispatch handler for a single node. It holds what
 * differs between a request's attempts (node, timing, whether it is a hedge or a discarded retryable
 * answer) and hands every event to its Session, which decides. It implements the raw handler
 * callbacks (`UpstreamHandler`: `onConnect`, `onHeaders` with the raw header list, `onData`,
 * `onComplete`, `onError`) that Sluice's own client calls and undici's pool (`https:` nodes) calls
 * too, so neither builds a controller or header object per request, and is its own flow
 * controller (`pause`, `resume`, `abort`).
 *
 * It also keeps its own time to first byte and body-gap deadlines, in its route's deadline lists
 * (one timer per list, an O(1) move per chunk), instead of undici's per-request `headersTimeout`
 * and `bodyTimeout`: those allocate a timer object per request phase that lives until undici's
 * next half-second sweep, long enough to be promoted out of the young generation.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { nowMs } from './clock.js';
import type { DeadlineEntry, DeadlineList } from './deadline-list.js';
import { Errors, SluiceError } from './errors.js';
import type { HeldHead } from './held-head.js';
import type { Session } from './session.js';
import { SSE_LINE_START } from './sse-first-event.js';
import { idleTimeoutError, ttfbTimeoutError } from './upstream-errors.js';

/** Flow control of a response body, as undici's DispatchController offers it (used by mirror.ts). */
export interface Controller {
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

export class Attempt implements DeadlineEntry {
  readonly session: Session;
  readonly node: UpstreamNode;
  /** 1 for the first attempt of the request. */
  readonly number: number;
  /** True for a hedge (a second attempt sent while the first still waits). */
  readonly hedge: boolean;
  /** Dispatch time, monotonic ms. */
  readonly startMs: number;
  /** Tokens this attempt adds to its node's `inFlightCost` (0 when the pool does not weigh work). */
  readonly cost: number;
  /** undici's abort for this exchange; null until it connected. */
  private abortExchange: ((reason: Error) => void) | null = null;
  /** undici's resume for a paused body; null before the head. */
  private resumeBody: (() => void) | null = null;
  /** True while the body is paused for backpressure (undici reads no more until resume). */
  private paused = false;
  /** Set once the session gave up on this attempt (lost a hedge race, client gone). */
  cancelled = false;
  /** The head was a retryable failure: its body is drained and dropped, then the request retries. */
  discard = false;
  /** Retry-After of a discarded answer, ms (0 when absent). */
  retryAfterMs = 0;
  /** The RetryOn bit of a discarded answer. */
  retryBit = 0;
  /** A retry was granted (budget taken) when this answer was discarded. */
  retryPlanned = false;
  /** True once node counters were released (exactly once per attempt). */
  released = false;
  /**
   * An event stream's head came and its first event has not: the time-to-first-byte deadline runs
   * on until that event (the head of a vLLM-style stream comes before its queueing and prefill),
   * and the body-gap deadline starts only then.
   */
  awaitFirstEvent = false;
  /** Monotonic time the response head arrived, ms; -1 before. */
  headMs = -1;
  /**
   * Streams: monotonic time the first SSE event arrived (time to first token; the head of a stream
   * comes before the prefill), ms; -1 before, and for answers that are not event streams.
   */
  firstTokenMs = -1;
  /** Where the search for the first SSE event stands between chunks (see sse-first-event.ts). */
  sseScan = SSE_LINE_START;
  /** Prompt tokens charged to the node's prefill queue until the first token; 0 when none (prefill-tracking.ts). */
  prefillTokens = 0;
  /** Prefill work queued on the node ahead of this attempt when it was sent, tokens (prefill-tracking.ts). */
  prefillAhead = 0;
  /** The policy's expected time to first token at dispatch, ms; -1 when it gave none. */
  expectedTtftMs = -1;
  /** The policy's estimate of the prompt tokens cached on the node; -1 when it gave none. */
  cachedTokens = -1;
  /** The policy's expected wait before this attempt's prefill starts, ms; -1 when it gave none. */
  queuedMs = -1;
  /** The stall the policy charged this attempt's prefill to the node's running requests, ms; -1 when none. */
  stallMs = -1;
  /** A streamed head not yet forwarded because a hedge may still win (held-head.ts); null otherwise. */
  held: HeldHead | null = null;
  /**
   * A discarded answer's head and body bytes up to HELD_MAX_BYTES, passed on should no node take
   * the retry after all; null for an attempt that was not discarded.
   */
  kept: HeldHead | null = null;
  /** The attempt's span id when the request is traced, else null. */
  traceSpanId: string | null = null;
  // DeadlineEntry: the attempt is in its route's time-to-first-byte list until the head, then in
  // its body-gap list until the end.
  deadlineAt = 0;
  dlPrev: DeadlineEntry | null = null;
  dlNext: DeadlineEntry | null = null;
  dlList: DeadlineList | null = null;
  /** The body-gap list the attempt joins at its head; null when the route has no idle timeout. */
  private idleList: DeadlineList | null = null;
  /**
   * A deadline that passed before undici handed over its abort (the request was still waiting for
   * a connection): the session was told at once; the exchange is aborted in onConnect.
   */
  private lateAbort: Error | null = null;
  /** Handed to undici (an onUpstreamRequest hook may still hold it before that). */
  sent = false;
  /** undici is done with it (onComplete or onError). */
  private ended = false;

  constructor(
    session: Session,
    node: UpstreamNode,
    number: number,
    hedge: boolean,
    startMs: number,
    cost: number,
  ) {
    this.session = session;
    this.node = node;
    this.number = number;
    this.hedge = hedge;
    this.startMs = startMs;
    this.cost = cost;
  }

  /**
   * Starts the attempt's deadlines at dispatch: time to first byte (`ttfb`, null for none), then,
   * from the head on, the longest gap between body chunks (`idle`, null for none).
   */
  watch(ttfb: DeadlineList | null, idle: DeadlineList | null, now: number): void {
    // HOT
    this.idleList = idle;
    if (ttfb !== null) ttfb.add(this, now);
  }

  /** A deadline passed (the list already dropped the attempt). */
  onDeadline(): void {
    const idle = this.idleList;
    if (this.resumeBody === null) {
      this.timeOut(ttfbTimeoutError());
    } else if (this.awaitFirstEvent) {
      this.timeOut(
        new SluiceError(Errors.ttfbTimeout, 'upstream node sent no first event of its stream in time'),
      );
    } else if (this.paused && idle !== null) {
      // The client is not reading: the gap is not the node's (as with undici's body timeout).
      idle.add(this, nowMs());
    } else {
      this.timeOut(idleTimeoutError());
    }
  }

  private timeOut(err: Error): void {
    if (this.abortExchange !== null) {
      this.abort(err);
      return;
    }
    // undici holds a request until its connection is up, which a node slow to accept can delay
    // until the pool's connect timeout: the deadline is the session's now, and undici's exchange
    // is aborted once it starts (onConnect). The node's counters stay taken until undici lets go
    // of the request (onError): it still holds a connection of the node's pool meanwhile.
    this.lateAbort = err;
    this.session.attemptError(this, err);
  }

  /**
   * The session lets go of the attempt before it ended (its client left): it is cancelled, and when
   * undici holds it and still waits for a connection for it, undici's exchange is aborted once it starts
   * (onConnect) and the node's counters stay taken until undici lets go (onError), as for a
   * deadline (`timeOut`). Call before the session releases the attempt, and `abort` after.
   */
  abandon(reason: Error): void {
    this.cancelled = true;
    // Sent, not ended and no abort handed over yet: undici waits for a connection for it.
    if (this.sent && !this.ended && this.abortExchange === null && this.lateAbort === null)
      this.lateAbort = reason;
  }

  /** True while undici still holds a request its session gave up on (see `timeOut`). */
  get heldByUndici(): boolean {
    return this.lateAbort !== null;
  }

  /** Gives back what this attempt counted on its node (once: the session's release or onError). */
  releaseNode(): void {
    this.node.removeLoad(this.cost);
  }

  /** Aborts the upstream exchange if it is still running. */
  cancel(reason: Error): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.abort(reason);
  }

  /** Aborts the exchange (undici then calls onError unless it already ended). */
  abort(reason: Error): void {
    const abort = this.abortExchange;
    if (abort !== null) {
      this.abortExchange = null;
      abort(reason);
    }
  }

  /** Stops reading the body until `resume` (the client cannot take more). */
  pause(): void {
    this.paused = true;
  }

  /** Reads the body again after `pause`. */
  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.idleList?.renew(this, nowMs());
    try {
      this.resumeBody?.();
    } catch {
      // undici refuses to resume a connection's parser inside another connection's callback: the
      // body stays paused, so try again once that callback has returned.
      this.paused = true;
      queueMicrotask(() => this.resume());
    }
  }

  onConnect(abort: (reason: Error) => void): void {
    this.abortExchange = abort;
    if (this.cancelled) this.abort(new Error('attempt cancelled'));
    else if (this.lateAbort !== null) this.abort(this.lateAbort);
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void): boolean {
    // HOT
    // Informational answers (103 Early Hints) are not the response; undici waits for the final one.
    if (status < 200) return true;
    this.resumeBody = resume;
    const ttfb = this.dlList;
    this.session.attemptHead(this, status, rawHeaders);
    // A stream keeps its time-to-first-byte deadline until its first event (firstEvent); an
    // attempt the session let go of meanwhile is in no list.
    if (this.awaitFirstEvent || this.released) return !this.paused;
    ttfb?.remove(this);
    this.idleList?.add(this, nowMs());
    return !this.paused;
  }

  /** The stream's first event arrived at `now`: the body-gap deadline takes over from the first-byte one. */
  firstEvent(now: number): void {
    if (!this.awaitFirstEvent) return;
    this.awaitFirstEvent = false;
    this.dlList?.remove(this);
    if (!this.released) this.idleList?.add(this, now);
  }

  onData(chunk: Buffer): boolean {
    // HOT
    // One clock reading per chunk serves the body-gap deadline and the session's chunk timing.
    const now = nowMs();
    this.idleList?.renew(this, now);
    this.session.attemptData(this, chunk, now);
    return !this.paused;
  }

  onComplete(): void {
    this.ended = true;
    this.abortExchange = null;
    this.dlList?.remove(this);
    this.session.attemptEnd(this);
  }

  onError(err: Error): void {
    this.ended = true;
    this.abortExchange = null;
    this.dlList?.remove(this);
    if (this.lateAbort === null) {
      this.session.attemptError(this, err);
      return;
    }
    // The session had its error at the deadline; undici let go of the request only now.
    this.releaseNode();
  }
}
