/**
 * The response head of a streamed attempt that is not the winner yet: while a hedge may still be
 * sent or is running, a stream wins with its first event, not its head (inference servers send the
 * head before the prefill). Its head and any keep-alive bytes before that event wait here, so that
 * nothing of a losing attempt reaches the client. Only allocated for attempts in that situation.
 */
import type { UpstreamHeaders } from './attempt.js';

export class HeldHead {
  /** Upstream status of the held head. */
  readonly status: number;
  readonly headers: UpstreamHeaders;
  /** Body bytes received before the first event (SSE comments, blank lines), in order; references. */
  readonly chunks: Buffer[] = [];

  constructor(status: number, headers: UpstreamHeaders) {
    this.status = status;
    this.headers = headers;
  }
}
