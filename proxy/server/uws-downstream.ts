/**
 * The Downstream implementation over a uWS HttpResponse: body collection with a size limit, writes
 * from async code inside `cork`, and backpressure through `tryEnd`/`write` + `onWritable`. It is the
 * only object that holds the HttpResponse, and it never touches it after `onAborted` fired. It also
 * keeps the listener's body and write deadlines (uWS has no per-listener setting for either).
 */
import type { HttpResponse } from 'uWebSockets.js';
import type { Downstream } from '../lifecycle/downstream.js';
import type { ErrorKind } from '../lifecycle/errors.js';
import { BodyCollector } from './body-collector.js';
import type { ListenerRuntime } from './request-intake.js';
import { statusLine } from './status-lines.js';

/** Receives the events of the client connection. */
export interface DownstreamListener {
  /** The whole request body arrived (`body` null when empty). */
  onBody(body: Buffer | null): void;
  /** The body grew past the limit. */
  onBodyTooLarge(): void;
  onDownstreamDrain(): void;
  onDownstreamAborted(): void;
  /** Answers with a local error (a body deadline) and finishes; the kind decides the close. */
  fail(kind: ErrorKind, message: string): void;
}

export class UwsDownstream extends BodyCollector implements Downstream {
  aborted = false;
  started = false;
  private readonly res: HttpResponse;
  private listener: DownstreamListener | null = null;
  /** Declared response length, or -1 for chunked. */
  private total = -1;
  private ended = false;
  /** Bytes of a sized body uWS did not take yet, and the write offset where they start. */
  private pending: Uint8Array | null = null;
  private pendingOffset = 0;
  /** The session ended the body while bytes were still pending: finish after the drain. */
  private endAfterDrain = false;
  private writable: ((offset: number) => boolean) | null = null;
  /** A reply that closes the connection, written on the next turn of the event loop. */
  private closeReply: { status: number; headers: readonly string[]; body: string | Uint8Array } | null = null;
  private readonly rt: ListenerRuntime;
  /** Fires when the body did not arrive within `body_timeout_ms` (armed only while reading one). */
  private bodyTimer: NodeJS.Timeout | null = null;
  /** Fires when the client took no bytes for `write_timeout_ms` (armed only under backpressure). */
  private writeTimer: NodeJS.Timeout | null = null;

  constructor(res: HttpResponse, rt: ListenerRuntime) {
    super();
    this.res = res;
    this.rt = rt;
    res.onAborted(() => {
      if (this.aborted) return;
      this.aborted = true;
      this.clearTimers();
      this.listener?.onDownstreamAborted();
    });
  }

  /** Attaches the session that receives events. */
  attach(listener: DownstreamListener): void {
    this.listener = listener;
  }

  /**
   * Collects the request body. `declared` is the Content-Length (-1 when chunked). The listener's
   * `onBody` runs once with the complete body, or `onBodyTooLarge` once when `max` is exceeded.
   */
  readBody(declared: number, max: number): void {
    this.startBody(declared, max);
    this.bodyTimer = setTimeout(onBodyTimeout, this.rt.config.body_timeout_ms, this);
    this.res.onData((chunk, isLast) => this.onData(chunk, isLast));
  }

  /** The body deadline passed: refuse the request (408, connection closed). */
  bodyTimedOut(): void {
    this.bodyTimer = null;
    if (this.aborted || this.maxBody < 0 || this.listener === null) return;
    this.giveUpBody();
    this.rt.bodyTimedOut(this.listener);
  }

  /** The client took no bytes for `write_timeout_ms`: close, which aborts the request. */
  writeTimedOut(): void {
    this.writeTimer = null;
    if (this.aborted) return;
    this.rt.stats.writeTimeouts++;
    this.res.close();
  }

  private clearTimers(): void {
    if (this.bodyTimer !== null) clearTimeout(this.bodyTimer);
    if (this.writeTimer !== null) clearTimeout(this.writeTimer);
    this.bodyTimer = null;
    this.writeTimer = null;
  }

  private onData(chunk: ArrayBuffer, isLast: boolean): void {
    // HOT
    if (this.aborted || this.maxBody < 0) return;
    // The chunk's memory is reclaimed when this callback returns: the collector copies it.
    if (!this.addBody(new Uint8Array(chunk), true)) {
      this.clearTimers();
      this.listener?.onBodyTooLarge();
      return;
    }
    if (!isLast) return;
    this.clearTimers();
    this.listener?.onBody(this.takeBody());
  }

  reply(status: number, headers: readonly string[], body: string | Uint8Array, close: boolean): void {
    if (this.aborted || this.started) return;
    this.started = true;
    this.ended = true;
    if (close) {
      // uWS parses every byte already received before it acts on a close, so a request pipelined
      // behind a refused one would still be served. Answering on the next turn keeps this response
      // pending meanwhile: uWS then drops a connection that pipelines instead of serving it.
      this.closeReply = { status, headers, body };
      setImmediate(sendCloseReply, this);
      return;
    }
    this.writeReply(status, headers, body, false);
  }

  private writeReply(
    status: number,
    headers: readonly string[],
    body: string | Uint8Array,
    close: boolean,
  ): void {
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      for (let i = 0; i < headers.length; i += 2) this.res.writeHeader(headers[i]!, headers[i + 1]!);
      this.res.end(body, close);
    });
  }

  /** Sends the deferred closing reply (see `reply`). */
  flushCloseReply(): void {
    const r = this.closeReply;
    this.closeReply = null;
    if (r !== null && !this.aborted) this.writeReply(r.status, r.headers, r.body, true);
  }

  start(status: number, headers: readonly string[], contentLength: number, noBody: boolean): void {
    // HOT
    if (this.aborted) return;
    this.started = true;
    this.total = contentLength;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      for (let i = 0; i < headers.length; i += 2) this.res.writeHeader(headers[i]!, headers[i + 1]!);
      if (noBody) {
        this.ended = true;
        this.res.endWithoutBody(contentLength >= 0 ? contentLength : undefined);
      } else if (contentLength === 0) {
        this.ended = true;
        this.res.end();
      }
    });
  }

  write(chunk: Uint8Array): boolean {
    // HOT
    if (this.aborted || this.ended) return true;
    let ok = true;
    this.res.cork(() => {
      if (this.total >= 0) {
        const offset = this.res.getWriteOffset();
        const [written, done] = this.res.tryEnd(chunk, this.total);
        if (done) this.ended = true;
        else if (!written) {
          // uWS took only part of the chunk; keep a copy of the rest (the caller reuses its buffer).
          this.pending = Uint8Array.prototype.slice.call(chunk, 0);
          this.pendingOffset = offset;
          ok = false;
        }
      } else {
        ok = this.res.write(chunk);
      }
    });
    if (!ok) {
      this.res.onWritable((this.writable ??= (offset) => this.onWritable(offset)));
      if (this.writeTimer === null)
        this.writeTimer = setTimeout(onWriteTimeout, this.rt.config.write_timeout_ms, this);
    }
    return ok;
  }

  private onWritable(offset: number): boolean {
    if (this.aborted) return true;
    // The client took bytes: its write deadline starts again.
    this.writeTimer?.refresh();
    const pending = this.pending;
    if (pending !== null) {
      const [written, done] = this.res.tryEnd(pending.subarray(offset - this.pendingOffset), this.total);
      if (done) this.ended = true;
      if (!written && !done) return false;
      this.pending = null;
      if (this.endAfterDrain) {
        this.clearTimers();
        this.end();
        return true;
      }
    }
    this.clearTimers();
    this.listener?.onDownstreamDrain();
    return true;
  }

  end(): void {
    if (this.aborted || this.ended) return;
    if (this.pending !== null) {
      this.endAfterDrain = true;
      return;
    }
    this.ended = true;
    this.clearTimers();
    this.res.cork(() => {
      if (this.total >= 0) {
        // A sized body that came up short: the node broke its own Content-Length. Marked aborted
        // first, so the close is not reported back as the client leaving.
        this.aborted = true;
        this.res.close();
      } else {
        this.res.end();
      }
    });
  }

  destroy(): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.clearTimers();
    // Marked aborted first: the onAborted that close() fires must not report a client abort.
    this.aborted = true;
    this.res.close();
  }
}

function sendCloseReply(d: UwsDownstream): void {
  d.flushCloseReply();
}

function onBodyTimeout(d: UwsDownstream): void {
  d.bodyTimedOut();
}

function onWriteTimeout(d: UwsDownstream): void {
  d.writeTimedOut();
}
