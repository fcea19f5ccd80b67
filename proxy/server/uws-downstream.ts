/**
 * The Downstream implementation over a uWS HttpResponse: body collection with a size limit, writes
 * from async code inside `cork`, and backpressure through `tryEnd`/`write` + `onWritable`. It is the
 * only object that holds the HttpResponse, and it never touches it after `onAborted` fired.
 *
 * The head of a streamed response is kept until the first body bytes or the end, so that head and
 * body leave in one cork (one send). uWS completes a head only with the first body write anyway (it
 * adds the framing headers then), so a client sees nothing later than before. Every cork runs a
 * module-level function over module-level arguments: no closure is allocated per write.
 *
 * It also keeps the listener's body and write deadlines (uWS has no per-listener setting for either).
 */
import type { HttpResponse } from 'uWebSockets.js';
import type { Downstream } from '../lifecycle/downstream.js';
import type { ErrorKind } from '../lifecycle/errors.js';
import { hasNonAscii } from '../lifecycle/headers.js';
import { BodyCollector } from './body-collector.js';
import type { ListenerRuntime } from './request-intake.js';
import { statusLine } from './status-lines.js';
import { nowMs } from '../lifecycle/clock.js';
import type { DeadlineEntry, DeadlineList } from '../lifecycle/deadline-list.js';

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

export class UwsDownstream extends BodyCollector implements Downstream, DeadlineEntry {
  aborted = false;
  started = false;
  /** The uWS response; touched only by this class and its corked functions. */
  readonly res: HttpResponse;
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
  /** The head `start` was given, not written yet (written with the first body bytes or the end). */
  private headStatus = 0;
  private headHeaders: readonly string[] | null = null;
  /** Some value of the kept head holds a byte of 0x80 or above (see `Downstream.start`). */
  private headBinary = false;
  private readonly rt: ListenerRuntime;
  /** The connection closes once this response ends (`closeWhenDone`: the server drains). */
  private closeConn = false;
  /** The request is a HEAD: a reply of Sluice's own carries its headers but not its body. */
  private readonly headRequest: boolean;
  /**
   * The body deadline (`body_timeout_ms`), kept in the listener's deadline list while a body is
   * read: one timer per listener, none per request (see lifecycle/deadline-list.ts).
   */
  deadlineAt = 0;
  dlPrev: DeadlineEntry | null = null;
  dlNext: DeadlineEntry | null = null;
  dlList: DeadlineList | null = null;
  /** Fires when the client took no bytes for `write_timeout_ms` (armed only under backpressure). */
  private writeTimer: NodeJS.Timeout | null = null;
  /**
   * A chunked body grew past the limit and its rest is being read and dropped: the bytes it may
   * still take before the connection is closed instead (see `dropLimit`), or -1 when not dropping.
   */
  private dropLeft = -1;
  /** The refusal that waits for the dropped body's end (`reply` while dropping), or null. */
  private held: {
    status: number;
    headers: readonly string[];
    body: string | Uint8Array;
    close: boolean;
  } | null = null;

  constructor(res: HttpResponse, rt: ListenerRuntime, headRequest = false) {
    super();
    this.res = res;
    this.rt = rt;
    this.headRequest = headRequest;
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
    this.rt.bodyDeadlines.add(this, nowMs());
    this.res.onData((chunk, isLast) => this.onData(chunk, isLast));
  }

  /**
   * uWS reads and drops the declared body of a request answered before it arrived, and closes the
   * connection if it stalls (about 10 s): the refusal may keep the connection up to `dropLimit`.
   */
  keepsRefusedBody(declared: number): boolean {
    return declared <= dropLimit(this.rt.config.max_body_bytes);
  }

  private onData(chunk: ArrayBuffer, isLast: boolean): void {
    // HOT
    if (this.aborted) return;
    if (this.maxBody < 0) {
      if (this.dropLeft >= 0) this.dropped(chunk.byteLength, isLast);
      return;
    }
    // The chunk's memory is reclaimed when this callback returns: the collector copies it.
    if (!this.addBody(new Uint8Array(chunk), true)) {
      // The rest is read and dropped, so that a client still sending reads the 413 rather than a
      // reset (the body deadline keeps running); past `dropLimit` the connection is closed.
      const limit = dropLimit(this.rt.config.max_body_bytes);
      if (chunk.byteLength <= limit && !isLast) this.dropLeft = limit - chunk.byteLength;
      else this.clearTimers();
      this.listener?.onBodyTooLarge();
      return;
    }
    if (!isLast) return;
    this.clearTimers();
    this.listener?.onBody(this.takeBody());
  }

  /** Bytes of a dropped body arrived: the held refusal goes out at its end, or closing past the limit. */
  private dropped(n: number, isLast: boolean): void {
    this.dropLeft -= n;
    if (isLast) this.sendHeld(false);
    else if (this.dropLeft < 0) this.sendHeld(true);
  }

  /** Sends the refusal held while a body was dropped; `close` forces the connection closed. */
  private sendHeld(close: boolean): void {
    this.dropLeft = -1;
    this.clearTimers();
    const h = this.held;
    this.held = null;
    if (h === null) return;
    this.started = false;
    this.reply(h.status, h.headers, h.body, h.close || close);
  }

  /** The body deadline passed: refuse the request (408, connection closed). */
  onDeadline(): void {
    if (this.dropLeft >= 0) {
      // A body being dropped took too long: its refusal goes out, and the connection closes.
      this.sendHeld(true);
      return;
    }
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
    this.dlList?.remove(this);
    if (this.writeTimer !== null) clearTimeout(this.writeTimer);
    this.writeTimer = null;
  }

  reply(status: number, headers: readonly string[], body: string | Uint8Array, close: boolean): void {
    if (this.aborted || this.started) return;
    this.started = true;
    this.ended = true;
    if (this.dropLeft >= 0) {
      // The refused body is still arriving: the reply waits for its end (see `onData`).
      this.held = { status, headers, body, close };
      return;
    }
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
    argStatus = status;
    argHeaders = headers;
    argBody = body;
    argClose = close;
    corkWith(this, corkedReply);
    argHeaders = null;
    argBody = '';
  }

  /** Writes the kept head (inside a cork). */
  writeHead(): void {
    // HOT
    const headers = this.headHeaders!;
    this.headHeaders = null;
    const res = this.res;
    if (this.headBinary) {
      res.writeStatus(statusLine(this.headStatus));
      writeBinaryHeaders(res, headers);
      return;
    }
    // uWS writes a status as `HTTP/1.1 <status>\r\n` and a header as `<name>: <value>\r\n`, each
    // call converting its strings to UTF-8 on its own. A proxied head is ASCII (`headBinary` is false)
    // with names and values checked free of CR, LF and NUL (by the upstream parser, or by the plugin
    // API for what plugins set), so it goes as one status argument: one native call and one
    // conversion for the whole head instead of two per header.
    let block = statusLine(this.headStatus);
    for (let i = 0; i < headers.length; i += 2) block += '\r\n' + headers[i]! + ': ' + headers[i + 1]!;
    res.writeStatus(block);
  }

  /** Sends the deferred closing reply (see `reply`). */
  flushCloseReply(): void {
    const r = this.closeReply;
    this.closeReply = null;
    if (r !== null && !this.aborted) this.writeReply(r.status, r.headers, r.body, true);
  }

  start(
    status: number,
    headers: readonly string[],
    contentLength: number,
    noBody: boolean,
    binary = false,
  ): void {
    // HOT
    if (this.aborted) return;
    this.started = true;
    this.total = contentLength;
    this.headStatus = status;
    this.headHeaders = headers;
    this.headBinary = binary;
    if (noBody || this.headRequest || contentLength === 0) {
      this.ended = true;
      argClose = noBody || this.headRequest;
      corkWith(this, corkedEmpty);
    }
  }

  closeWhenDone(): void {
    this.closeConn = true;
  }

  write(chunk: Uint8Array): boolean {
    // HOT
    if (this.aborted || this.ended) return true;
    argChunk = chunk;
    writeOk = true;
    corkWith(this, corkedWrite);
    argChunk = null;
    if (!writeOk) {
      this.res.onWritable((this.writable ??= (offset) => this.onWritable(offset)));
      if (this.writeTimer === null)
        this.writeTimer = setTimeout(onWriteTimeout, this.rt.config.write_timeout_ms, this);
    }
    return writeOk;
  }

  /** The body of `write`, inside a cork. Sets `writeOk` false under backpressure. */
  writeCorked(chunk: Uint8Array): void {
    // HOT
    if (this.headHeaders !== null) this.writeHead();
    const res = this.res;
    if (this.total >= 0) {
      const offset = res.getWriteOffset();
      if (this.closeConn && offset === 0 && chunk.length === this.total) {
        // The whole body at once while draining: uWS closes the connection after it (an answer in
        // several chunks keeps its connection until the drain ends).
        res.end(chunk, true);
        this.ended = true;
        return;
      }
      const [written, done] = res.tryEnd(chunk, this.total);
      if (done) this.ended = true;
      else if (!written) {
        // uWS took only part of the chunk; keep a copy of the rest (the caller reuses its buffer).
        this.pending = Uint8Array.prototype.slice.call(chunk, 0);
        this.pendingOffset = offset;
        writeOk = false;
      }
    } else {
      writeOk = res.write(chunk);
    }
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
    if (this.total >= 0) {
      // A sized body that came up short: the node broke its own Content-Length. Marked aborted
      // first, so the close is not reported back as the client leaving.
      this.headHeaders = null;
      this.aborted = true;
      this.res.close();
      return;
    }
    corkWith(this, corkedEnd);
  }

  /** The end of a chunked body, inside a cork (with the kept head when no byte was written yet). */
  endCorked(): void {
    if (this.headHeaders !== null) this.writeHead();
    // Not `end('', true)` while draining: in chunked mode this uWS build writes its
    // `Connection: close` line after the last chunk, into the body. Such a connection closes when
    // the drain ends.
    this.res.end();
  }

  /** The body of a response that has none (HEAD, 204, 304, or Content-Length 0), inside a cork. */
  emptyCorked(noBody: boolean): void {
    const status = this.headStatus;
    this.writeHead();
    if (!noBody) {
      if (this.closeConn) this.res.end('', true);
      else this.res.end();
      return;
    }
    // The node's length (a HEAD's, a 304's) goes on; a 204 has none (RFC 9110 §8.6).
    endWithLength(this.res, this.total >= 0 && status !== 204 ? this.total : -1);
  }

  /** A complete reply, inside a cork. */
  replyCorked(status: number, headers: readonly string[], body: string | Uint8Array, close: boolean): void {
    const res = this.res;
    res.writeStatus(statusLine(status));
    // Replies are not the hot path: every value is looked at (a plugin's reply may hold bytes).
    writeBinaryHeaders(res, headers);
    if (!this.headRequest) {
      res.end(body, close);
      return;
    }
    // An answer to HEAD has no content (RFC 9110 §9.3.2), only the body's length; a closing one
    // is written as empty (length 0), since endWithoutBody with the close flag announces 2^63 bytes.
    if (close) res.end('', true);
    else endWithLength(res, typeof body === 'string' ? Buffer.byteLength(body) : body.length);
  }

  abandonHead(): boolean {
    // A kept head means no byte of this response was written (see `start`).
    if (this.aborted || this.headHeaders === null) return false;
    this.headHeaders = null;
    this.started = false;
    this.total = -1;
    return true;
  }

  destroy(): void {
    if (this.aborted || this.ended) return;
    this.ended = true;
    this.clearTimers();
    this.headHeaders = null;
    // Marked aborted first: the onAborted that close() fires must not report a client abort.
    this.aborted = true;
    this.res.close();
  }
}

/*
 * Arguments of the corked functions below. uWS runs a cork's function synchronously, so one set of
 * module-level slots serves every response, and no closure is allocated per write.
 */
let corked: UwsDownstream | null = null;
let argChunk: Uint8Array | null = null;
let argStatus = 0;
let argHeaders: readonly string[] | null = null;
let argBody: string | Uint8Array = '';
let argClose = false;
/** Result of the last corked write: false under backpressure. */
let writeOk = true;

/** Runs `fn` corked on `d`'s response, with `d` as the target of the corked functions. */
function corkWith(d: UwsDownstream, fn: () => void): void {
  // HOT
  corked = d;
  d.res.cork(fn);
}

/**
 * Writes headers whose values are byte strings that may hold characters of U+0080 and above: uWS
 * encodes a string as UTF-8, so those values go as their latin1 bytes instead. Proxied heads take
 * this path only when they hold such bytes.
 */
function writeBinaryHeaders(res: HttpResponse, headers: readonly string[]): void {
  for (let i = 0; i < headers.length; i += 2) {
    const v = headers[i + 1]!;
    res.writeHeader(headers[i]!, hasNonAscii(v) ? Buffer.from(v, 'latin1') : v);
  }
}

/**
 * Ends a response without content, announcing `length` bytes (none when -1). uWS's
 * `endWithoutBody(length)` writes the length but then waits for the body it announced and treats
 * the connection's next request as pipelined (it closes the connection), and given `undefined` it
 * announces 2^63 bytes; without an argument it writes no length and completes the response. So the
 * length is a plain header.
 */
function endWithLength(res: HttpResponse, length: number): void {
  if (length >= 0) res.writeHeader('content-length', String(length));
  res.endWithoutBody();
}

function corkedWrite(): void {
  corked!.writeCorked(argChunk!);
}

function corkedEnd(): void {
  corked!.endCorked();
}

function corkedEmpty(): void {
  corked!.emptyCorked(argClose);
}

function corkedReply(): void {
  corked!.replyCorked(argStatus, argHeaders!, argBody, argClose);
}

function sendCloseReply(d: UwsDownstream): void {
  d.flushCloseReply();
}

function onWriteTimeout(d: UwsDownstream): void {
  d.writeTimedOut();
}

/**
 * How many body bytes a uWS listener reads and drops after refusing a body over `max_body_bytes`
 * (413), so that a client still sending it reads the answer instead of a reset: four times the
 * limit, at least 1 MiB. A larger body closes the connection with the 413.
 */
export function dropLimit(maxBodyBytes: number): number {
  return Math.max(4 * maxBodyBytes, 1 << 20);
}
