/**
 * One client connection of Sluice's own HTTP/1.1 engine: it feeds received bytes to the strict
 * parser, admits each head through the shared intake, keeps the pipelined exchanges in request
 * order, writes their responses strictly in that order, and applies backpressure both ways (the
 * socket is not read while `pipelining` exchanges are unanswered; a session's writes stop while
 * the connection holds `write_buffer_bytes`). Deadlines are fields the listener's sweep checks, so
 * no timer is allocated per request.
 *
 * ```
 *   queue: [ ex0 (writes to the socket) | ex1 (bytes queued) | ex2 (reading its body) ]
 *            oldest unanswered                                  newest
 * ```
 */
import type { Socket } from 'node:net';
import { nowMs } from '../lifecycle/clock.js';
import type { ErrorKind } from '../lifecycle/errors.js';
import type { SessionHost } from '../lifecycle/session.js';
import { BODY_CHUNKED, BODY_NONE, Http1Parser, STOP, type Http1ParserOwner } from './http1-parser.js';
import { endHead } from './request-head.js';
import type { ListenerRuntime, RequestIntake } from './request-intake.js';
import { NetExchange, type ExchangeConnection } from './net-exchange.js';

const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n';
/** How long a closing connection may keep sending bytes we discard before it is cut, ms. */
const LINGER_MS = 2000;

export class NetConnection implements Http1ParserOwner, ExchangeConnection {
  readonly socket: Socket;
  /** Unanswered exchanges, oldest first; `queue[0]` writes to the socket. */
  readonly queue: NetExchange[] = [];
  /** Deadlines (monotonic ms, 0 = none) checked by the listener's sweep. */
  headDeadline = 0;
  bodyDeadline = 0;
  writeDeadline = 0;
  lingerDeadline = 0;
  private readonly rt: ListenerRuntime;
  private readonly intake: RequestIntake;
  private readonly host: SessionHost;
  private readonly parser: Http1Parser;
  private readonly remote: string;
  /** `https` on a TLS listener (`x-forwarded-proto`), else `http`. */
  private readonly proto: string;
  /** The listener's certificate generation this connection was accepted with (TLS only). */
  readonly tlsGeneration: number;
  /** Bytes queued by exchanges that are not first in line. */
  private queuedBytes = 0;
  /** The exchange whose body the parser is reading, or null. */
  private bodyTarget: NetExchange | null = null;
  /**
   * The body target's client waits for `100 Continue`, owed once that exchange is first in line
   * (pipelined behind unanswered ones); its body deadline starts only then.
   */
  private continueOwed = false;
  /** No more requests are read: the connection ends once the queue is answered. */
  private closing = false;
  private paused = false;
  private closed = false;
  /** Called once when the socket closed (the listener forgets the connection). */
  private readonly onClosed: (c: NetConnection) => void;

  constructor(
    socket: Socket,
    rt: ListenerRuntime,
    intake: RequestIntake,
    host: SessionHost,
    onClosed: (c: NetConnection) => void,
    proto = 'http',
    tlsGeneration = 0,
  ) {
    this.socket = socket;
    this.proto = proto;
    this.tlsGeneration = tlsGeneration;
    this.rt = rt;
    this.intake = intake;
    this.host = host;
    this.onClosed = onClosed;
    this.remote = socket.remoteAddress ?? '';
    this.parser = new Http1Parser(this, {
      maxHeaderBytes: rt.config.max_header_bytes,
      maxUrlBytes: rt.config.max_url_bytes,
    });
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => this.onData(d));
    socket.on('end', () => this.onEnd());
    socket.on('drain', () => this.onDrain());
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.onClose());
    this.headDeadline = nowMs() + rt.config.header_timeout_ms;
  }

  closesAfter(ex: NetExchange): boolean {
    return this.closing && this.bodyTarget === null && this.queue[this.queue.length - 1] === ex;
  }

  private onData(d: Buffer): void {
    // HOT
    // Once the parser stopped, what the client still sends is read and dropped (a close with
    // unread bytes would reset the connection and could destroy the last response in flight).
    this.parser.feed(d);
  }

  // ---- parser events ----

  readyForHead(): boolean {
    // HOT
    if (this.closing) {
      // The last request's body is read: what follows is dropped as it arrives. Kept in the
      // parser, a client sending on after `Connection: close` would grow its buffer, copied whole
      // at every read, for as long as the answer takes.
      this.parser.stop();
      return false;
    }
    if (this.queue.length < this.rt.config.pipelining) return true;
    // The pipeline is full: stop reading until an exchange is answered.
    if (!this.paused) {
      this.paused = true;
      this.socket.pause();
    }
    return false;
  }

  onHeadStart(): void {
    if (this.headDeadline === 0) this.headDeadline = nowMs() + this.rt.config.header_timeout_ms;
  }

  onHead(): number {
    // HOT
    this.headDeadline = 0;
    const head = endHead(this.remote, this.proto, this.rt.config.trust_forwarded);
    const ex = new NetExchange(this, head.http10, head.closeAfter, head.method === 'HEAD');
    this.queue.push(ex);
    // A refused request's reply closes the connection; its body is never parsed.
    if (this.intake.admit(this.rt, head, ex) === null) return STOP;
    // After `Connection: close` no further request is read (RFC 9112 §9.6).
    if (head.closeAfter) this.closing = true;
    if (head.contentLength <= 0 && !head.chunked) {
      if (this.closing) this.parser.stop();
      return this.closing ? STOP : BODY_NONE;
    }
    this.bodyTarget = ex;
    // A client that waits for `100 Continue` sends no body before it: the body's time starts with
    // the 100, which goes out when the request is first in line (RFC 9110 §10.1.1).
    if (head.expectContinue && !head.http10 && this.queue[0] !== ex) {
      this.continueOwed = true;
      this.bodyDeadline = 0;
    } else {
      if (head.expectContinue && !head.http10) this.socket.write(CONTINUE, 'latin1');
      this.bodyDeadline = nowMs() + this.rt.config.body_timeout_ms;
    }
    return head.chunked ? BODY_CHUNKED : head.contentLength;
  }

  onBodyData(chunk: Buffer): void {
    // HOT
    // The client did not wait for the 100 (RFC 9110 §10.1.1 lets it): none is owed any more.
    if (this.continueOwed) this.bodyStarted();
    this.bodyTarget?.bodyData(chunk);
  }

  onBodyEnd(): void {
    const ex = this.bodyTarget;
    this.bodyTarget = null;
    this.continueOwed = false;
    this.bodyDeadline = 0;
    ex?.bodyEnd();
  }

  /** The body target's body may now come: no 100 is owed, its deadline runs from now. */
  private bodyStarted(): void {
    this.continueOwed = false;
    this.bodyDeadline = nowMs() + this.rt.config.body_timeout_ms;
  }

  onParseError(kind: ErrorKind, message: string): void {
    this.headDeadline = 0;
    const ex = this.bodyTarget;
    this.bodyTarget = null;
    this.continueOwed = false;
    this.bodyDeadline = 0;
    this.stopReading();
    if (ex !== null) {
      // A broken body: the session answers (400, connection closed) like any refusal.
      ex.failBody(kind, message);
      this.host.stats.countRejected(kind.id);
      return;
    }
    const refusal = new NetExchange(this, false, true);
    this.queue.push(refusal);
    this.intake.refuse(refusal, kind, message);
  }

  // ---- exchange events ----

  send(ex: NetExchange, data: Buffer | string): void {
    // HOT
    if (this.closed) return;
    if (this.queue[0] === ex) {
      const ok = typeof data === 'string' ? this.socket.write(data, 'latin1') : this.socket.write(data);
      if (!ok && this.writeDeadline === 0) this.writeDeadline = nowMs() + this.rt.config.write_timeout_ms;
      const held = this.socket.writableLength + this.queuedBytes;
      if (held > this.rt.stats.bufferedHighWater) this.rt.stats.bufferedHighWater = held;
      return;
    }
    (ex.out ??= []).push(data);
    ex.outBytes += data.length;
    this.queuedBytes += data.length;
  }

  sendAll(ex: NetExchange, a: Buffer | string, b: Buffer | string, c: Buffer | string | null): void {
    // HOT
    const first = this.queue[0] === ex && !this.closed;
    if (first) this.socket.cork();
    this.send(ex, a);
    this.send(ex, b);
    if (c !== null) this.send(ex, c);
    if (first) this.socket.uncork();
  }

  full(ex: NetExchange): boolean {
    // HOT
    // The oldest exchange's answer is what the socket holds; the answers queued behind it wait for
    // it to end, so counting them would stall it for good once they outgrow the buffer.
    const held =
      this.queue[0] === ex ? this.socket.writableLength : this.socket.writableLength + this.queuedBytes;
    return held >= this.rt.config.write_buffer_bytes;
  }

  complete(ex: NetExchange): void {
    // HOT
    if (ex.closeAfter) {
      // Whatever is left of this request's body is not read (e.g. after a 413).
      if (this.bodyTarget === ex) {
        this.bodyTarget = null;
        this.continueOwed = false;
        this.bodyDeadline = 0;
      }
      this.stopReading();
    }
    if (this.queue[0] !== ex) return;
    this.advance();
  }

  /** Closes the connection now; `reset` sends a TCP reset (a cut the client must not take for an end). */
  destroy(reset = false): void {
    if (reset) {
      try {
        this.socket.resetAndDestroy();
        return;
      } catch {
        // A TLS socket has no TCP handle of its own to reset: it is destroyed without the TLS
        // close_notify, which a TLS client takes for a truncation all the same.
      }
    }
    this.socket.destroy();
  }

  /** Retires answered exchanges from the front and lets the next one write. */
  private advance(): void {
    // HOT
    const q = this.queue;
    while (q.length > 0 && q[0]!.done) {
      const ex = q.shift()!;
      if (ex.closeDelimited) {
        // An HTTP/1.0 body that ends with the connection: nothing can follow it.
        for (const later of q.splice(0)) {
          this.dropQueued(later);
          later.abort();
        }
        break;
      }
      const next = q[0];
      // The request whose client waits for `100 Continue` is now first in line, not yet answered.
      if (this.continueOwed && next === this.bodyTarget) {
        if (next.out === null && !next.started) this.socket.write(CONTINUE, 'latin1');
        this.bodyStarted();
      }
      if (next !== undefined && next.out !== null) {
        this.queuedBytes -= next.outBytes;
        const out = next.out;
        next.out = null;
        next.outBytes = 0;
        for (const data of out) this.send(next, data);
      }
    }
    if (q.length === 0) {
      if (this.closing || this.host.draining) {
        this.end();
        return;
      }
      if (!this.parser.midRequest && this.headDeadline === 0)
        this.headDeadline = nowMs() + this.rt.config.header_timeout_ms;
    }
    this.wake();
    if (this.paused && !this.closing && q.length < this.rt.config.pipelining) {
      this.paused = false;
      this.socket.resume();
      this.parser.run();
    }
  }

  private onDrain(): void {
    this.writeDeadline = 0;
    this.wake();
  }

  /** Lets blocked writers go on, oldest first, while the connection has room. */
  private wake(): void {
    for (const ex of this.queue) {
      if (this.full(ex)) return;
      ex.drained();
    }
  }

  /** Takes `ex` (abandoned) out of the byte count: its queued answer will never be written. */
  private dropQueued(ex: NetExchange): void {
    this.queuedBytes -= ex.outBytes;
    ex.out = null;
    ex.outBytes = 0;
  }

  /** The server drains: read no more requests, close once the queue is answered. */
  drain(): void {
    this.stopReading();
    if (this.queue.length === 0 && this.bodyTarget === null) this.end();
  }

  /** Reads no more requests; the connection ends once the queue is answered. */
  private stopReading(): void {
    if (this.closing) return;
    this.closing = true;
    this.headDeadline = 0;
    if (this.bodyTarget === null) this.parser.stop();
  }

  /** Ends our side once everything was written; what the client still sends is read and dropped. */
  private end(): void {
    this.closing = true;
    this.parser.stop();
    this.headDeadline = 0;
    this.bodyDeadline = 0;
    if (this.paused) {
      this.paused = false;
      this.socket.resume();
    }
    this.socket.end();
    this.lingerDeadline = nowMs() + LINGER_MS;
  }

  private onEnd(): void {
    // The client sends nothing more, and has most likely gone: TCP tells a client that closed from
    // one that only half-closed (and still reads) only when something is written to it. A request
    // whose answer has not started, the one whose body was cut here included, is abandoned now, as
    // on the uWS engine and in nginx: a client that left holds no admission slot, no node and no
    // tenant concurrency while its answer is computed. Answers already being written go on (a
    // write to a client that left fails and aborts it); the requests behind the first abandoned
    // one are abandoned with it, since answers go out in request order.
    this.bodyTarget = null;
    this.continueOwed = false;
    this.bodyDeadline = 0;
    this.closing = true;
    this.parser.stop();
    const q = this.queue;
    const first = q.findIndex((ex) => !ex.done && !ex.answering);
    if (first >= 0) {
      for (const ex of q.splice(first)) {
        this.dropQueued(ex);
        ex.abort();
      }
    }
    if (q.length === 0) this.end();
    else if (q[0]!.done) this.advance();
    else this.wake();
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing = true;
    this.parser.stop();
    const q = this.queue.splice(0);
    for (const ex of q) if (!ex.done) ex.abort();
    this.onClosed(this);
  }

  // ---- deadlines (called by the listener's sweep) ----

  /** Checks the deadlines at `now`; closes the connection or refuses the request when one passed. */
  checkDeadlines(now: number): void {
    if (this.headDeadline !== 0 && now >= this.headDeadline) {
      this.headDeadline = 0;
      // Closed without an answer, partial head or idle: a 408 would cost a write and a lingering
      // close per connection, which is what a slowloris attack wants Sluice to spend.
      if (this.parser.midRequest && this.bodyTarget === null) {
        this.rt.stats.headerTimeouts++;
        this.socket.destroy();
      } else if (this.queue.length === 0) {
        this.socket.destroy(); // an idle keep-alive connection
      }
    }
    if (this.bodyDeadline !== 0 && now >= this.bodyDeadline) {
      this.bodyDeadline = 0;
      const ex = this.bodyTarget;
      this.bodyTarget = null;
      this.stopReading();
      this.parser.stop();
      if (ex !== null && ex.listener !== null) {
        ex.refuseBody();
        this.rt.bodyTimedOut(ex.listener);
      }
    }
    if (this.writeDeadline !== 0 && now >= this.writeDeadline) {
      this.writeDeadline = 0;
      this.rt.stats.writeTimeouts++;
      this.socket.destroy();
    }
    if (this.lingerDeadline !== 0 && now >= this.lingerDeadline) this.socket.destroy();
  }
}
