/**
 * One upstream call whose answer is collected whole (micro-batches: the batcher splits the answer
 * per item). Holds the node's in-flight counters for the call, reports its outcome to the pool's
 * health (passive outlier ejection, as a streamed attempt does) and maps transport failures onto the
 * error catalogue. The whole exchange is bounded by the route's `total_ms`, and the answer kept by
 * `MAX_ANSWER_BYTES`: a node that never stops sending cannot hold the call or fill the memory.
 */
import type { BatchResponse, BatchTransport } from '../batch/batch-transport.js';
import type { PoolHealth } from '../health/pool-health.js';
import { Errors, SluiceError } from '../lifecycle/errors.js';
import { statusReason } from '../lifecycle/retry-rules.js';
import { classifyUpstreamError, ttfbTimeoutError } from '../lifecycle/upstream-errors.js';
import type { UpstreamHandler } from './h1-client.js';
import type { UpstreamNode } from './upstream-node.js';

/** Rough tokens per batch item, for the node's in-flight work. */
const TOKENS_PER_ITEM = 128;

/** The largest batch answer kept, bytes (embeddings of 2,048 inputs of 4,096 dimensions fit). */
export const MAX_ANSWER_BYTES = 256 * 1024 * 1024;

/** The pool's health as of the call (null without health checks or ejection). */
export interface HealthSource {
  readonly health: PoolHealth | null;
}

/**
 * The undici handler of one buffered call. The time-to-first-byte deadline runs from dispatch, as a
 * streamed attempt's does: undici's own `headersTimeout` starts only once the request is written,
 * so a node slow to accept would have held the call until the pool's connect timeout first.
 */
class BufferedCall implements UpstreamHandler {
  private status = 0;
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  private readonly node: UpstreamNode;
  private readonly cost: number;
  private readonly pool: HealthSource;
  private readonly totalMs: number;
  private readonly resolve: (r: BatchResponse) => void;
  private readonly reject: (e: Error) => void;
  /** Aborts the exchange; null until it started (the connection is up) and after it ended. */
  private abortExchange: ((reason: Error) => void) | null = null;
  private ttfbTimer: NodeJS.Timeout | null = null;
  private totalTimer: NodeJS.Timeout | null = null;
  /** The call's error once it failed early (a deadline, an answer too large): undici's end is only released. */
  private lateError: Error | null = null;

  constructor(
    node: UpstreamNode,
    cost: number,
    pool: HealthSource,
    ttfbMs: number,
    totalMs: number,
    resolve: (r: BatchResponse) => void,
    reject: (e: Error) => void,
  ) {
    this.node = node;
    this.cost = cost;
    this.pool = pool;
    this.totalMs = totalMs;
    this.resolve = resolve;
    this.reject = reject;
    if (ttfbMs > 0) this.ttfbTimer = setTimeout(ttfbPassed, ttfbMs, this);
    if (totalMs > 0) this.totalTimer = setTimeout(totalPassed, totalMs, this);
  }

  onConnect(abort: (reason: Error) => void): void {
    this.abortExchange = abort;
    if (this.lateError !== null) this.abort(this.lateError);
  }

  onHeaders(status: number): boolean {
    if (this.ttfbTimer !== null) clearTimeout(this.ttfbTimer);
    this.ttfbTimer = null;
    this.status = status;
    if (this.lateError !== null) return true;
    // As for a streamed attempt: a 5xx counts against the node, a busy node's 429 does not.
    const health = this.pool.health;
    if (status >= 500) health?.recordFailure(this.node, statusReason(status));
    else health?.recordSuccess(this.node);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.lateError !== null) return true;
    this.bytes += chunk.length;
    if (this.bytes > MAX_ANSWER_BYTES) {
      this.fail(
        new SluiceError(
          Errors.upstreamProtocol,
          `upstream node's batch answer is larger than ${MAX_ANSWER_BYTES} bytes`,
        ),
      );
      return true;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    this.done();
    if (this.lateError === null) this.resolve({ status: this.status, body: Buffer.concat(this.chunks) });
  }

  onError(err: Error): void {
    this.done();
    if (this.lateError !== null) return;
    const e = classifyUpstreamError(err);
    this.node.failures++;
    this.pool.health?.recordFailure(this.node, e.kind.code);
    this.reject(e);
  }

  /** No response head by the deadline: the call fails now; undici's exchange is aborted once it starts. */
  ttfbTimedOut(): void {
    this.ttfbTimer = null;
    this.fail(ttfbTimeoutError());
  }

  /** The whole exchange did not end within `total_ms`. */
  totalTimedOut(): void {
    this.totalTimer = null;
    this.fail(new SluiceError(Errors.totalTimeout, `upstream did not finish within ${this.totalMs} ms`));
  }

  /**
   * The call fails now with `err` (counted against the node); undici's exchange is aborted (once it
   * starts) and its answer dropped.
   */
  private fail(err: SluiceError): void {
    if (this.lateError !== null) return;
    this.lateError = err;
    this.chunks.length = 0;
    this.node.failures++;
    this.pool.health?.recordFailure(this.node, err.kind.code);
    this.reject(err);
    this.abort(err);
  }

  private abort(reason: Error): void {
    const abort = this.abortExchange;
    if (abort === null) return;
    this.abortExchange = null;
    abort(reason);
  }

  /** undici let go of the exchange: the node's counters are given back (it held a connection until then). */
  private done(): void {
    this.abortExchange = null;
    if (this.ttfbTimer !== null) clearTimeout(this.ttfbTimer);
    if (this.totalTimer !== null) clearTimeout(this.totalTimer);
    this.ttfbTimer = null;
    this.totalTimer = null;
    this.node.removeLoad(this.cost);
  }
}

function ttfbPassed(call: BufferedCall): void {
  call.ttfbTimedOut();
}

function totalPassed(call: BufferedCall): void {
  call.totalTimedOut();
}

/** Sends micro-batches (or their single items) to one node at a fixed path. */
export class NodeBatchTransport implements BatchTransport {
  readonly node: UpstreamNode;
  private readonly path: string;
  private readonly pool: HealthSource;
  private readonly ttfbMs: number;
  private readonly idleMs: number;
  private readonly totalMs: number;
  private readonly headers: string[];

  /**
   * `pool`: where the call's outcome is reported (the pool's state); the timeouts are the route's,
   * ms (0: none); `extraHeaders`: the pool's `request_headers` (flat), or null.
   */
  constructor(
    node: UpstreamNode,
    path: string,
    pool: HealthSource,
    ttfbMs: number,
    idleMs: number,
    totalMs: number,
    extraHeaders: readonly string[] | null = null,
  ) {
    this.node = node;
    this.path = path;
    this.pool = pool;
    this.ttfbMs = ttfbMs;
    this.idleMs = idleMs;
    this.totalMs = totalMs;
    this.headers = ['content-type', 'application/json', ...(extraHeaders ?? [])];
  }

  send(body: Buffer, items: number): Promise<BatchResponse> {
    const node = this.node;
    const cost = items * TOKENS_PER_ITEM;
    node.addLoad(cost);
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
        new BufferedCall(node, cost, this.pool, this.ttfbMs, this.totalMs, resolve, reject),
      );
    });
  }
}
