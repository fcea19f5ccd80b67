/**
 * Turns failures that produced no usable node answer (transport errors, no eligible node, an answer
 * that cannot be split, a closed or full batcher) into the per-item status and OpenAI-shaped body.
 * Kinds come from the data-plane catalogue; node answers with an error status are passed through
 * untouched and never come here.
 */

import { Errors, SluiceError, errorBody, type ErrorKind } from '../lifecycle/errors.js';

/** A status and body for one item. */
export interface ItemFailure {
  status: number;
  body: Buffer;
  /** True when another upstream call may succeed. */
  retryable: boolean;
}

function failure(kind: ErrorKind, message: string, retryable: boolean): ItemFailure {
  return { status: kind.status, body: Buffer.from(errorBody(kind, message)), retryable };
}

/** A rejected `BatchTransport.send`: keeps a `SluiceError`'s kind, otherwise a retryable 502 reset. */
export function transportFailure(err: unknown): ItemFailure {
  if (err instanceof SluiceError)
    return failure(err.kind, err.message, err.kind.retryable || err.kind.status >= 500);
  const message = err instanceof Error ? err.message : String(err);
  return failure(Errors.upstreamReset, `upstream call failed: ${message}`, true);
}

/** No node could take the call (the picker returned null); retryable. */
export function noNodeFailure(route: string): ItemFailure {
  return failure(Errors.noHealthyNode, `no node available for batch route ${route}`, true);
}

/** A 2xx answer that does not match the items sent; not retried (the node would answer the same). */
export function splitFailure(route: string): ItemFailure {
  return failure(
    Errors.upstreamProtocol,
    `the node's answer for batch route ${route} does not match its items`,
    false,
  );
}

/** The codec could not build a call's body (a codec that cannot combine, used in native mode); final. */
export function codecFailure(route: string, err: unknown): ItemFailure {
  const message = err instanceof Error ? err.message : String(err);
  return failure(Errors.internal, `batch route ${route} cannot build the upstream body: ${message}`, false);
}

/** Body sent to items submitted after `close()`. Built once. */
export const CLOSED_BODY = Buffer.from(errorBody(Errors.draining, 'the batcher is shutting down'));
/** Status sent to items submitted after `close()`. */
export const CLOSED_STATUS = Errors.draining.status;
/** Body sent when `maxQueuedItems` items are already waiting. Built once. */
export const FULL_BODY = Buffer.from(errorBody(Errors.overloaded, 'too many batch items waiting'));
/** Status sent when the batcher is full. */
export const FULL_STATUS = Errors.overloaded.status;
