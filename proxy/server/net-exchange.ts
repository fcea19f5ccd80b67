/**
 * One request/response exchange on a connection of Sluice's own HTTP/1.1 engine: the Downstream a
 * Session talks to. It collects the request body the parser hands it, frames the response
 * (Content-Length, chunked, or close-delimited for HTTP/1.0) and gives its bytes to the connection,
 * which writes them in request order. It never touches the socket itself. A streamed response's head
 * is kept until its first body bytes or its end, so both leave in one send (as on uWS, which
 * completes a head only with the first body write).
 */
import type { ErrorKind } from '../lifecycle/errors.js';
import { BodyCollector } from './body-collector.js';
import type { DownstreamListener } from './uws-downstream.js';
import type { ServerDownstream } from './request-intake.js';
import { statusLine } from './status-lines.js';

/** What an exchange needs from its connection. */
export interface ExchangeConnection {
  /** Response bytes of `ex`, written now if it is the oldest unanswered exchange, else queued. */
  send(ex: NetExchange, data: Buffer | string): void;
  /** Like `send` for two or three pieces, written in one system call when they go out now. */
  sendAll(ex: NetExchange, a: Buffer | string, b: Buffer | string, c: Buffer | string | null): void;
  /**
   * True when the connection holds as many response bytes as `ex` may add to: it must wait. The
   * oldest unanswered exchange counts only what the socket holds, since the answers queued behind
   * it cannot leave before it ends.
   */
  full(ex: NetExchange): boolean;
  /** `ex`'s response is complete (all its bytes were given to `send`). */
  complete(ex: NetExchange): void;
  /** Closes the connection at once (a response that cannot be finished); `reset` with a TCP reset. */
  destroy(reset?: boolean): void;
  /** True when `ex` is the last response before the connection closes (draining, `Connection: close`). */
  closesAfter(ex: NetExchange): boolean;
}

const CRLF = '\r\n';
const LAST_CHUNK = '0\r\n\r\n';

/** `date: ...\r\n`, rebuilt at most once a second. */
let dateField = '';
let dateSecond = 0;
function date(): string {
  const s = Math.floor(Date.now() / 1000);
  if (s !== dateSecond) {
    dateSecond = s;
    dateField = `date: ${new Date(s * 1000).toUTCString()}\r\n`;
  }
  return dateField;
}

export class NetExchange extends BodyCollector implements ServerDownstream {
  aborted = false;
  started = false;
  /** The response is complete: every byte went to the connection. */
  done = false;
  /** The connection closes after this response (client asked, HTTP/1.0, refusal). */
  closeAfter: boolean;
  /** The response body ends with the connection (HTTP/1.0 without a length). */
  closeDelimited = false;
  /** Response bytes queued while an earlier exchange is still answering. */
  out: (Buffer | string)[] | null = null;
  outBytes = 0;
  /** A write returned false: the session waits for `onDownstreamDrain`. */
  blocked = false;
  listener: DownstreamListener | null = null;
  private readonly conn: ExchangeConnection;
  private readonly http10: boolean;
  /** The request is a HEAD: a reply of Sluice's own carries its headers but not its body. */
  private readonly headRequest: boolean;
  /** Response framing: -1 chunked, -2 close-delimited (HTTP/1.0), else body bytes still expected. */
  private remaining = 0;
  /** The head `start` built, kept to leave with the first body bytes or the end (one send). */
  private pendingHead = '';

  constructor(conn: ExchangeConnection, http10: boolean, closeAfter: boolean, headRequest = false) {
    super();
    this.conn = conn;
    this.http10 = http10;
    this.closeAfter = closeAfter;
    this.headRequest = headRequest;
  }

  /** Bytes of the response went to the connection (written, or queued behind an earlier answer). */
  get answering(): boolean {
    return this.started && this.pendingHead === '';
  }

  attach(listener: DownstreamListener): void {
    this.listener = listener;
  }

  readBody(declared: number, max: number): void {
    this.startBody(declared, max);
  }

  /** The own engine closes after a refusal and reads what the client still sends for a while (its linger). */
  keepsRefusedBody(): boolean {
    return false;
  }

  /** Body bytes from the parser (a view into a received chunk, which is not reused). */
  bodyData(chunk: Buffer): void {
    // HOT
    if (this.aborted || this.maxBody < 0) return;
    if (!this.addBody(chunk, false)) this.listener?.onBodyTooLarge();
  }

  /** The parser saw the end of the body. */
  bodyEnd(): void {
    if (this.aborted || this.maxBody < 0) return;
    this.listener?.onBody(this.takeBody());
  }

  /** Stops collecting the body (refused, timed out). */
  refuseBody(): void {
    this.giveUpBody();
  }

  /** The body deadline passed: the listener answers 408 (through `fail`). */
  failBody(kind: ErrorKind, message: string): void {
    if (this.aborted || this.maxBody < 0) return;
    this.refuseBody();
    this.listener?.fail(kind, message);
  }

  /** The connection closed before this exchange completed. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.listener?.onDownstreamAborted();
  }

  reply(status: number, headers: readonly string[], body: string | Uint8Array, close: boolean): void {
    if (this.aborted || this.started) return;
    this.started = true;
    if (close) this.closeAfter = true;
    const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    const head = this.head(status, headers, `content-length: ${length}\r\n`);
    // An answer to HEAD has no content (RFC 9110 §9.3.2), only the length a GET would get.
    if (length === 0 || this.headRequest) this.conn.send(this, head);
    else
      this.conn.sendAll(this, head, typeof body === 'string' ? Buffer.from(body) : Buffer.from(body), null);
    this.finish();
  }

  start(status: number, headers: readonly string[], contentLength: number, bodyless: boolean): void {
    // HOT
    if (this.aborted || this.started) return;
    this.started = true;
    const noBody = bodyless || this.headRequest;
    let framing: string;
    if (noBody) framing = contentLength >= 0 && status !== 204 ? `content-length: ${contentLength}\r\n` : '';
    else if (contentLength >= 0) {
      framing = `content-length: ${contentLength}\r\n`;
      this.remaining = contentLength;
    } else if (this.http10) {
      // HTTP/1.0 has no chunked coding: the body ends with the connection (RFC 9112 §6.3).
      framing = '';
      this.remaining = -2;
      this.closeAfter = true;
      this.closeDelimited = true;
    } else {
      framing = 'transfer-encoding: chunked\r\n';
      this.remaining = -1;
    }
    const head = this.head(status, headers, framing);
    if (noBody || contentLength === 0) {
      this.conn.send(this, head);
      this.finish();
    } else this.pendingHead = head;
  }

  write(chunk: Uint8Array): boolean {
    // HOT
    if (this.aborted || this.done) return true;
    const n = chunk.length;
    if (n === 0) return true;
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, n);
    const head = this.pendingHead;
    this.pendingHead = '';
    if (this.remaining === -1) {
      this.conn.sendAll(this, `${head}${n.toString(16)}\r\n`, buf, CRLF);
    } else if (this.remaining === -2) {
      if (head === '') this.conn.send(this, buf);
      else this.conn.sendAll(this, head, buf, null);
    } else {
      // A node that sends more than its Content-Length is cut at the length it declared.
      const take = n <= this.remaining ? buf : buf.subarray(0, this.remaining);
      this.remaining -= take.length;
      if (head === '') this.conn.send(this, take);
      else this.conn.sendAll(this, head, take, null);
      if (this.remaining === 0) {
        this.finish();
        return true;
      }
    }
    if (this.conn.full(this)) {
      this.blocked = true;
      return false;
    }
    return true;
  }

  end(): void {
    if (this.aborted || this.done || !this.started) return;
    const head = this.pendingHead;
    this.pendingHead = '';
    if (this.remaining === -1) this.conn.send(this, `${head}${LAST_CHUNK}`);
    else if (this.remaining === -2) {
      if (head !== '') this.conn.send(this, head);
    } else if (this.remaining > 0) {
      // A sized body that came up short: the node broke its own Content-Length. Marked aborted
      // first, so the close is not reported back as the client leaving.
      this.aborted = true;
      this.done = true;
      this.conn.destroy();
      return;
    }
    this.finish();
  }

  /** The connection closes after the queue is answered while the server drains (NetConnection). */
  closeWhenDone(): void {}

  abandonHead(): boolean {
    // A kept head means no byte of this response went to the connection (see `start`).
    if (this.aborted || this.done || this.pendingHead === '') return false;
    this.pendingHead = '';
    this.started = false;
    this.remaining = 0;
    this.closeDelimited = false;
    return true;
  }

  destroy(): void {
    if (this.aborted || this.done) return;
    // Marked aborted first: the connection's close must not report a client abort for this one.
    this.aborted = true;
    this.done = true;
    // A body that ends with the connection (HTTP/1.0) reads as complete at a plain close: the
    // connection is reset instead, so the client sees the cut.
    this.conn.destroy(this.closeDelimited);
  }

  /** The connection can take bytes again: a blocked writer may go on. */
  drained(): void {
    if (!this.blocked || this.aborted) return;
    this.blocked = false;
    this.listener?.onDownstreamDrain();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.conn.complete(this);
  }

  /** The response head: status line, the session's fields, date, framing, connection. */
  private head(status: number, headers: readonly string[], framing: string): string {
    // HOT
    let h = `HTTP/1.1 ${statusLine(status)}\r\n`;
    for (let i = 0; i < headers.length; i += 2) h += `${headers[i]!}: ${headers[i + 1]!}\r\n`;
    h += date();
    h += framing;
    if (this.closeAfter || this.conn.closesAfter(this)) {
      if (!hasConnectionClose(headers)) h += 'connection: close\r\n';
    } else if (this.http10) h += 'connection: keep-alive\r\n';
    return `${h}\r\n`;
  }
}

function hasConnectionClose(headers: readonly string[]): boolean {
  for (let i = 0; i < headers.length; i += 2) if (headers[i] === 'connection') return true;
  return false;
}
