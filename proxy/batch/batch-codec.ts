/**
 * How a micro-batcher understands its items: which items may share a batch, which are identical,
 * how the upstream body of a call is built and how a combined answer is split back per item. The
 * batcher treats bodies as opaque and asks the codec; codecs do no I/O.
 */

/** The item format of one route. Implementations: `jsonItemCodec`, `openAiEmbeddingsCodec`. */
export interface BatchCodec {
  /**
   * Items with different group keys never share a batch (native: different model, dimensions or
   * encoding cannot be combined). Called once per item. // HOT
   */
  groupKey(body: object): string;
  /**
   * Items of one window with the same non-null key are computed once. `raw`: the body's bytes as
   * the caller received them, or null. Called once per item. // HOT
   */
  dedupKey(body: object, raw: Buffer | null): string | null;
  /**
   * The body of one upstream call carrying `bodies` (native: combined; fanout: always one body,
   * and only for an item submitted without its bytes: fanout forwards those as they are).
   */
  encode(bodies: readonly object[]): Buffer;
  /**
   * Splits a 2xx answer to `encode(bodies)` into one 2xx body per item, in order; null when the
   * answer does not match the request (wrong count, not JSON), which fails the call's items with 502.
   */
  split(answer: Buffer, bodies: readonly object[]): Buffer[] | null;
  /**
   * False for a body this codec cannot combine with others as it is (native embeddings: an input
   * that is missing, empty or of another shape): it is then forwarded alone as the client sent it,
   * so the node answers it, not a rewritten version. Absent: every body. // HOT
   */
  combinable?(body: object): boolean;
}

/**
 * The fanout codec for any JSON body: no grouping, items are identical when their bytes (or, without
 * them, their serialised bodies) are, a call's body is the item's own JSON, the answer goes back
 * untouched.
 */
export const jsonItemCodec: BatchCodec = {
  groupKey: () => '',
  // HOT: the body is the identity; latin1 maps bytes to characters one to one, far cheaper than
  // serialising the parsed body again. Sampling routes should set `dedup: false`.
  dedupKey: (body, raw) => (raw !== null ? raw.toString('latin1') : JSON.stringify(body)),
  encode(bodies) {
    if (bodies.length !== 1) throw new RangeError('jsonItemCodec encodes exactly one body per call');
    return Buffer.from(JSON.stringify(bodies[0]));
  },
  split: (answer, bodies) => (bodies.length === 1 ? [answer] : null),
};
