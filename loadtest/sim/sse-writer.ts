/**
 * Writes one server-sent-events response: the head, `data:` events, the `[DONE]` terminator, with
 * write backpressure honoured and an optional deliberate connection drop after N events. It does not
 * know what the events mean.
 */

import type { ServerResponse } from 'node:http';
import { isGone } from './http-io.js';

/**
 * An SSE response writer. While the socket is congested (`write` returned false) events collect in
 * memory and go out as one write on `'drain'`; the engine keeps generating meanwhile, as a real
 * server's output queue does, and the buffer is bounded by the request's max_tokens.
 */
export class SseWriter {
  private pending: string[] = [];
  private waitingDrain = false;
  private ending = false;
  private destroyAfterFlush = false;
  private events = 0;
  private closed = false;
  private dropping = false;

  /** `dropAfter` >= 0 destroys the connection once that many events have been flushed; -1 never. */
  constructor(
    private readonly res: ServerResponse,
    private readonly dropAfter: number,
  ) {}

  /** True when no more events will be accepted (ended, dropped, or the client is gone). */
  get done(): boolean {
    return this.closed || isGone(this.res);
  }

  /** True when this writer destroyed (or is about to destroy) the connection on purpose. */
  get dropped(): boolean {
    return this.dropping;
  }

  /** Writes and flushes the head (200, text/event-stream). A drop after 0 events happens here. */
  start(): void {
    if (this.res.headersSent || this.done) return;
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
    });
    this.res.flushHeaders();
    if (this.dropAfter === 0) {
      this.closed = true;
      this.dropping = true;
      // Let the head reach the socket before the reset, so the client sees a started, then cut, stream.
      setImmediate(() => this.res.destroy());
    }
  }

  /** Sends one `data: <json>` event (starting the response if needed). */
  event(json: string): void {
    if (!this.res.headersSent) this.start();
    if (this.done) return;
    this.events++;
    const drop = this.events === this.dropAfter;
    if (drop) {
      this.closed = true;
      this.dropping = true;
    }
    this.write(`data: ${json}\n\n`, drop);
  }

  /** Sends `data: [DONE]` and ends the response once everything buffered has been flushed. */
  end(): void {
    if (!this.res.headersSent) this.start();
    if (this.done) return;
    this.closed = true;
    if (this.waitingDrain) {
      this.pending.push('data: [DONE]\n\n');
      this.ending = true;
      return;
    }
    this.res.end('data: [DONE]\n\n');
  }

  private write(text: string, destroyAfter: boolean): void {
    if (this.waitingDrain) {
      this.pending.push(text);
      if (destroyAfter) this.destroyAfterFlush = true;
      return;
    }
    const ok = this.res.write(text, destroyAfter ? this.onFlushedDestroy : undefined);
    if (!ok) {
      this.waitingDrain = true;
      this.res.once('drain', this.onDrain);
    }
  }

  private readonly onFlushedDestroy = (): void => {
    this.res.destroy();
  };

  private readonly onDrain = (): void => {
    this.waitingDrain = false;
    if (isGone(this.res)) return;
    const text = this.pending.join('');
    this.pending = [];
    if (this.ending) {
      this.res.end(text);
      return;
    }
    if (text !== '') this.write(text, this.destroyAfterFlush);
  };
}
