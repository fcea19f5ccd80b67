/**
 * One upstream attempt of a request: the undici dispatch handler for a single node. It holds what
 * differs between a request's attempts (node, controller, timing, whether it is a hedge or a
 * discarded retryable answer) and hands every event to its Session, which decides.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { HeldHead } from './held-head.js';
import { SSE_LINE_START } from './sse-first-event.js';
import type { Session } from './session.js';

/** The subset of undici's DispatchController used here. */
export interface Controller {
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

/** Parsed upstream response headers, as undici gives them. */
export type UpstreamHeaders = Record<string, string | string[] | undefined>;

export class Attempt {
  readonly session: Session;
  readonly node: UpstreamNode;
  /** 1 for the first attempt of the request. */
  readonly number: number;
  /** True for a hedge (a second attempt sent while the first still waits). */
  readonly hedge: boolean;
  /** Dispatch time, monotonic ms. */
  readonly startMs: number;
  controller: Controller | null = null;
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
  /** The policy's expected time to first token at dispatch, ms; -1 when it gave none. */
  expectedTtftMs = -1;
  /** The policy's estimate of the prompt tokens cached on the node; -1 when it gave none. */
  cachedTokens = -1;
  /** The policy's expected wait before this attempt's prefill starts, ms; -1 when it gave none. */
  queuedMs = -1;
  /** A streamed head not yet forwarded because a hedge may still win (held-head.ts); null otherwise. */
  held: HeldHead | null = null;

  constructor(session: Session, node: UpstreamNode, number: number, hedge: boolean, startMs: number) {
    this.session = session;
    this.node = node;
    this.number = number;
    this.hedge = hedge;
    this.startMs = startMs;
  }

  /** Aborts the upstream exchange if it is still running. */
  cancel(reason: Error): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.controller?.abort(reason);
  }

  onRequestStart(controller: Controller): void {
    this.controller = controller;
    if (this.cancelled) controller.abort(new Error('attempt cancelled'));
  }

  onResponseStart(_controller: Controller, status: number, headers: UpstreamHeaders): void {
    // HOT
    this.session.attemptHead(this, status, headers);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    // HOT
    this.session.attemptData(this, controller, chunk);
  }

  onResponseEnd(): void {
    this.session.attemptEnd(this);
  }

  onResponseError(_controller: Controller, err: Error): void {
    this.session.attemptError(this, err);
  }
}
