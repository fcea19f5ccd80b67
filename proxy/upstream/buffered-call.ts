/**
 * One upstream call whose answer is collected whole (micro-batches: the batcher splits the answer
 * per item). Holds the node's in-flight counters for the call and maps transport failures onto the
 * error catalogue, like a streamed attempt. Batch answers are small JSON documents, so buffering is
 * bounded by the node's answer.
 */
import { errors, type Dispatcher } from 'undici';
import type { BatchResponse, BatchTransport } from '../batch/batch-transport.js';
import { classifyUpstreamError } from '../lifecycle/upstream-errors.js';
import type { UpstreamNode } from './upstream-node.js';

/** Rough tokens per batch item, for the node's in-flight work. */
const TOKENS_PER_ITEM = 128;

/**
 * The undici handler of one buffered call. The time-to-first-byte deadline runs from dispatch, as a
 * streamed attempt's does: undici's own `headersTimeout` starts only once the request is written,
 * so a node slow to accept would have held the call until the pool's connect timeout first.
 */
class BufferedCall implements Dispatcher.DispatchHandler {
  private status = 0;
  private readonly chunks: Buffer[] = [];
  private readonly node: UpstreamNode;
  private readonly cost: number;
  private readonly resolve: (r: BatchResponse) => void;
  private readonly reject: (e: Error) => void;
  /** undici's control of the exchange; null until it started (the connection is up). */
  private controller: Dispatcher.DispatchController | null = null;
  private ttfbTimer: NodeJS.Timeout | null = null;
  /** The deadline's error once it passed: the caller has its answer, undici's end is only released. */
  private lateError: Error | null = null;

  constructor(
    node: UpstreamNode,
    cost: number,
    ttfbMs: number,
    resolve: (r: BatchResponse) => void,
    reject: (e: Error) => void,
  ) {
    this.node = node;
    this.cost = cost;
    this.resolve = resolve;
    this.reject = reject;
    if (ttfbMs > 0) this.ttfbTimer = setTimeout(ttfbPassed, ttfbMs, this);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.lateError !== null) controller.abort(this.lateError);
  }

  onResponseStart(_c: Dispatcher.DispatchController, status: number): void {
    this.clearTimer();
    this.status = status;
  }

  onResponseData(_c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    this.done();
    if (this.lateError === null) this.resolve({ status: this.status, body: Buffer.concat(this.chunks) });
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.done();
    if (this.lateError !== null) return;
    this.node.failures++;
    this.reject(classifyUpstreamError(err));
  }

  /** No response head by the deadline: the call fails now; undici's exchange is aborted once it starts. */
  timedOut(): void {
    this.ttfbTimer = null;
    const err = new errors.HeadersTimeoutError();
    this.lateError = err;
    this.node.failures++;
    this.reject(classifyUpstreamError(err));
    this.controller?.abort(err);
  }

  /** undici let go of the exchange: the node's counters are given back (it held a connection until then). */
  private done(): void {
    this.clearTimer();
    this.node.inFlight--;
    this.node.inFlightCost -= this.cost;
  }

  private clearTimer(): void {
    if (this.ttfbTimer !== null) clearTimeout(this.ttfbTimer);
    this.ttfbTimer = null;
  }
}

function ttfbPassed(call: BufferedCall): void {
  call.timedOut();
}

/** Sends micro-batches (or their single items) to one node at a fixed path. */
export class NodeBatchTransport implements BatchTransport {
  readonly node: UpstreamNode;
  private readonly path: string;
  private readonly ttfbMs: number;
  private readonly idleMs: number;
  private readonly headers: string[];

  constructor(node: UpstreamNode, path: string, ttfbMs: number, idleMs: number) {
    this.node = node;
    this.path = path;
    this.ttfbMs = ttfbMs;
    this.idleMs = idleMs;
    this.headers = ['content-type', 'application/json'];
  }

  send(body: Buffer, items: number): Promise<BatchResponse> {
    const node = this.node;
    const cost = items * TOKENS_PER_ITEM;
    node.inFlight++;
    node.inFlightCost += cost;
    node.attempts++;
    return new Promise<BatchResponse>((resolve, reject) => {
      node.dispatch(
        {
          method: 'POST',
          path: this.path,
          headers: this.headers,
          body,
          ttfbMs: this.ttfbMs,
          idleMs: this.idleMs,
        },
        new BufferedCall(node, cost, this.ttfbMs, resolve, reject),
      );
    });
  }
}
