/** Request ids: a random per-process prefix plus a counter, unique enough to trace a request. */
import { randomBytes } from 'node:crypto';

const prefix = randomBytes(6).toString('hex');
let counter = 0;

/** A new request id, e.g. `3f9a1c0b2e7d-1a2b`. */
export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `${prefix}-${counter.toString(36)}`;
}
