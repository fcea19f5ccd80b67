/**
 * The response head of a streamed attempt that is not the winner yet: while a hedge may still be
 * sent or is running, a stream wins with its first event, not its head (inference servers send the
 * head before the prefill). Its head and any keep-alive bytes before that event wait here, so that
 * nothing of a losing attempt reaches the client. A retryable answer dropped for a retry is kept
 * the same way (its head and first bytes), to be passed on if no node can take the retry after all.
 * Only allocated for attempts in these situations.
 */
import type { ResponseHead } from './headers.js';

/**
 * Bytes held before the first event at most, in total; past it the stream is sent on without
 * waiting for an event (a node that sends that much before its first token is not prefilling).
 */
export const HELD_MAX_BYTES = 64 * 1024;

export class HeldHead implements ResponseHead {
  /** Upstream status of the held head. */
  readonly status: number;
  /** The head as `readResponseHead` read it (copied: the shared ResponseHead is reused). */
  headers: string[];
  contentType: string;
  contentLength: string;
  retryAfter: string | undefined;
  transferEncoding: string;
  binary: boolean;
  /** Body bytes received before the first event, in order; references, no copies. */
  readonly chunks: Buffer[] = [];
  /** Bytes in `chunks`. */
  private bytes = 0;
  /** A dropped answer's body ended within the bound: `chunks` is the whole body. */
  ended = false;

  constructor(status: number, head: ResponseHead) {
    this.status = status;
    this.headers = head.headers;
    this.contentType = head.contentType;
    this.contentLength = head.contentLength;
    this.retryAfter = head.retryAfter;
    this.transferEncoding = head.transferEncoding;
    this.binary = head.binary;
  }

  /** Keeps a body chunk until the attempt wins or loses. */
  add(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
  }

  /** True once the held bytes passed HELD_MAX_BYTES. */
  full(): boolean {
    return this.bytes > HELD_MAX_BYTES;
  }
}
