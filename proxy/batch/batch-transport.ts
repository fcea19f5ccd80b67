/**
 * The upstream seen by the micro-batcher: something that sends one request body to one node and
 * returns its status and body. The batch module never opens connections itself; the request path
 * injects an implementation (undici in production, `fetch` in tests).
 */

/** What a node answered to one call. */
export interface BatchResponse {
  /** HTTP status of the node's answer. */
  status: number;
  /** The complete response body. */
  body: Buffer;
}

/**
 * One node's upstream. `send` is called once per upstream call: with one item's body in `fanout`
 * mode, with the combined body in `native` mode. It resolves with whatever the node answered
 * (any status) and rejects only when no answer came (connect error, reset, timeout); a rejection
 * with a `SluiceError` keeps its catalogue kind in the item's error body.
 */
export interface BatchTransport {
  /** `items`: how many batch items the body carries (for the transport's own accounting). */
  send(body: Buffer, items: number): Promise<BatchResponse>;
}

/**
 * Chooses the node for each upstream call (native) or each micro-batch (fanout). Called on the
 * batching path, so it must be cheap; returns null when no node is eligible, which fails the call
 * as retryable `no_healthy_upstream`.
 */
export interface BatchNodePicker {
  pick(): BatchTransport | null;
}

/** True when `upstream` is a picker rather than a single transport. */
export function isNodePicker(upstream: BatchTransport | BatchNodePicker): upstream is BatchNodePicker {
  return typeof (upstream as Partial<BatchNodePicker>).pick === 'function';
}
