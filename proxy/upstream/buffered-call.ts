/**
 * One upstream call whose answer is collected whole (micro-batches: the batcher splits the answer
 * per item). Holds the node's in-flight counters for the call and maps transport failures onto the
 * error catalogue, like a streamed attempt. Batch answers are small JSON documents, so buffering is
 * bounded by the node's answer.
 */
import type { Dispatcher } from 'undici';
import type { BatchResponse, BatchTransport } from '../batch/batch-transport.js';
import { classifyUpstreamError } from '../lifecycle/upstream-errors.js';
import type { UpstreamNode } from './upstream-node.js';

/** Rough tokens per batch item, for the node's in-flight work. */
const TOKENS_PER_ITEM = 128;

/** The undici handler of one buffered call. */
class BufferedCall implements Dispatcher.DispatchHandler {
  private status = 0;
  private readonly chunks: Buffer[] = [];
  private readonly node: UpstreamNode;
  private readonly cost: number;
  private readonly resolve: (r: BatchResponse) => void;
  private readonly reject: (e: Error) => void;

  constructor(
    node: UpstreamNode,
    cost: number,
    resolve: (r: BatchResponse) => void,
    reject: (e: Error) => void,
  ) {
    this.node = node;
    this.cost = cost;
    this.resolve = resolve;
    this.reject = reject;
  }

  onRequestStart(): void {}

  onResponseStart(_c: Dispatcher.DispatchController, status: number): void {
    this.status = status;
  }

  onResponseData(_c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    this.done();
    this.resolve({ status: this.status, body: Buffer.concat(this.chunks) });
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.done();
    this.node.failures++;
    this.reject(classifyUpstreamError(err));
  }

  private done(): void {
    this.node.inFlight--;
    this.node.inFlightCost -= this.cost;
  }
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
        new BufferedCall(node, cost, resolve, reject),
      );
    });
  }
}
