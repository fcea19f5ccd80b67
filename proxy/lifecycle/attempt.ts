/**
 * One upstream attempt of a request: the undici dispatch handler for a single node. It holds what
 * differs between a request's attempts (node, timing, whether it is a hedge or a discarded retryable
 * answer) and hands every event to its Session, which decides. It implements undici's handler
 * callbacks in their raw form (`onConnect`, `onHeaders` with the raw header list, `onData`,
 * `onComplete`, `onError`), so undici builds no controller or header object per request, and is its
 * own flow controller (`pause`, `resume`, `abort`).
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { HeldHead } from './held-head.js';
import type { Session } from './session.js';
import { SSE_LINE_START } from './sse-first-event.js';

/** Flow control of a response body, as undici's DispatchController offers it (used by mirror.ts). */
export interface Controller {
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

export class Attempt {
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
  /** The attempt's span id when the request is traced, else null. */
  traceSpanId: string | null = null;

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
    this.resumeBody?.();
  }

  onConnect(abort: (reason: Error) => void): void {
    this.abortExchange = abort;
    if (this.cancelled) this.abort(new Error('attempt cancelled'));
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void): boolean {
    // HOT
    // Informational answers (103 Early Hints) are not the response; undici waits for the final one.
    if (status < 200) return true;
    this.resumeBody = resume;
    this.session.attemptHead(this, status, rawHeaders);
    return !this.paused;
  }

  onData(chunk: Buffer): boolean {
    // HOT
    this.session.attemptData(this, chunk);
    return !this.paused;
  }

  onComplete(): void {
    this.abortExchange = null;
    this.session.attemptEnd(this);
  }

  onError(err: Error): void {
    this.abortExchange = null;
    this.session.attemptError(this, err);
  }
}
