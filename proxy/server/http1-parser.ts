/**
 * A strict HTTP/1.1 request parser (RFC 9112) for Sluice's own downstream engine: request line,
 * header fields, Content-Length and chunked bodies, pipelined requests one after another. It
 * refuses what the RFC lets a server refuse (obs-fold, whitespace before the colon, bare CR or LF,
 * control characters, bad chunk sizes) instead of guessing, and never buffers more than one head.
 * It owns no socket: its owner feeds bytes, admits each head and says when the next may be parsed.
 *
 * ```
 *   HEAD ──(no body)──────────────────────────────────────────────> HEAD
 *     ├──(Content-Length)──> LENGTH ──(all bytes)─────────────────> HEAD
 *     └──(chunked)──> CHUNK_SIZE ──> CHUNK_DATA ──> CHUNK_CRLF ──┐
 *                        ^  └──(size 0)──> TRAILER ──(empty line)──> HEAD
 *                        └───────────────────────────────────────┘
 * ```
 */
import { Errors, type ErrorKind } from '../lifecycle/errors.js';
import { addHeader, beginHead, useTargetAuthority } from './request-head.js';

/** What the parser reports to the connection that feeds it. */
export interface Http1ParserOwner {
  /** True when the next request head may be parsed now (room in the pipeline, connection open). */
  readyForHead(): boolean;
  /** The first bytes of a request head arrived. */
  onHeadStart(): void;
  /**
   * A head was captured (`beginHead` .. `addHeader`); the owner ends it and admits the request.
   * Returns what to read next: `BODY_NONE`, `BODY_CHUNKED`, a Content-Length > 0, or `STOP`.
   */
  onHead(): number;
  /** Body bytes of the current request (a view into the received chunk). */
  onBodyData(chunk: Buffer): void;
  /** The current request's body is complete. */
  onBodyEnd(): void;
  /** The bytes are not acceptable HTTP/1.1: refuse with `kind`; the parser has stopped. */
  onParseError(kind: ErrorKind, message: string): void;
}

/** `onHead` results besides a Content-Length. */
export const BODY_NONE = 0;
export const BODY_CHUNKED = -1;
/** The request was refused or the connection is closing: parse nothing more. */
export const STOP = -2;

const S_HEAD = 0;
const S_LENGTH = 1;
const S_CHUNK_SIZE = 2;
const S_CHUNK_DATA = 3;
const S_CHUNK_CRLF = 4;
const S_TRAILER = 5;
const S_DEAD = 6;

const CR = 13;
const LF = 10;
const SP = 32;
const HTAB = 9;
const COLON = 58;
const SEMICOLON = 0x3b;
const EQUALS = 0x3d;
const DQUOTE = 0x22;
const BACKSLASH = 0x5c;
const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1');
/**
 * Longest chunk-size line (size and extensions, up to its LF), bytes. Extension bytes do not count
 * toward `max_body_bytes`, so this bounds them per chunk however the line arrives.
 */
const MAX_CHUNK_LINE = 1024;
/** Allowance for the method, spaces, version and line end around the target, bytes. */
const REQUEST_LINE_OVERHEAD = 64;

/** tchar (RFC 9110 §5.6.2): the bytes of methods and field names. */
const TCHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~") TCHAR[c.charCodeAt(0)] = 1;
for (let c = 0x30; c <= 0x39; c++) TCHAR[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) TCHAR[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) TCHAR[c] = 1;
/** field-vchar, SP and HTAB (RFC 9110 §5.5): the bytes of a field value. No CTL, no DEL. */
const FIELD = new Uint8Array(256);
FIELD[SP] = 1;
FIELD[HTAB] = 1;
for (let c = 0x21; c <= 0x7e; c++) FIELD[c] = 1;
for (let c = 0x80; c <= 0xff; c++) FIELD[c] = 1;
/** Bytes of a request target: visible ASCII, no `#` (a fragment is never sent, RFC 9112 §3.2). */
const TARGET = new Uint8Array(256);
for (let c = 0x21; c <= 0x7e; c++) TARGET[c] = 1;
TARGET[0x23] = 0;
const HEX = new Int8Array(256).fill(-1);
for (let c = 0; c < 10; c++) HEX[0x30 + c] = c;
for (let c = 0; c < 6; c++) {
  HEX[0x41 + c] = 10 + c;
  HEX[0x61 + c] = 10 + c;
}
const ABSOLUTE_FORM = /^https?:\/\//i;

/** Limits the parser enforces before anything is buffered past them. */
export interface Http1Limits {
  /** The listener's `max_header_bytes`. */
  maxHeaderBytes: number;
  /** The listener's `max_url_bytes`. */
  maxUrlBytes: number;
}

export class Http1Parser {
  private readonly owner: Http1ParserOwner;
  /** Longest head accepted before its end is found, bytes. */
  private readonly maxHead: number;
  private readonly maxRequestLine: number;
  private readonly maxTrailer: number;
  private state = S_HEAD;
  /** Received bytes not consumed yet, from `pos`; null when everything was consumed. */
  private buf: Buffer | null = null;
  private pos = 0;
  /** Where the search for the end of the head resumes (bytes before it were searched). */
  private scanned = 0;
  /** Body bytes left: of the Content-Length, or of the current chunk. */
  private remaining = 0;
  private trailerBytes = 0;
  /** True inside `run` (an owner callback may ask to run again; the running loop goes on instead). */
  private running = false;

  constructor(owner: Http1ParserOwner, limits: Http1Limits) {
    this.owner = owner;
    this.maxRequestLine = limits.maxUrlBytes + REQUEST_LINE_OVERHEAD;
    this.maxHead = limits.maxHeaderBytes + this.maxRequestLine;
    this.maxTrailer = limits.maxHeaderBytes;
  }

  /** True while part of a request (head or body) has arrived and its rest has not. */
  get midRequest(): boolean {
    return this.state !== S_HEAD ? this.state !== S_DEAD : this.buf !== null;
  }

  /** True once the parser stopped for good (refusal, error, close). */
  get dead(): boolean {
    return this.state === S_DEAD;
  }

  /** Stops parsing for good; buffered bytes are dropped. */
  stop(): void {
    this.state = S_DEAD;
    this.buf = null;
  }

  /** Takes received bytes and parses as far as the owner allows. */
  feed(chunk: Buffer): void {
    // HOT
    if (this.state === S_DEAD) return;
    const buf = this.buf;
    if (buf === null) {
      this.buf = chunk;
      this.pos = 0;
      this.scanned = 0;
    } else {
      const rest = buf.length - this.pos;
      this.buf = Buffer.concat([buf.subarray(this.pos), chunk], rest + chunk.length);
      this.scanned -= this.pos;
      this.pos = 0;
    }
    this.run();
  }

  /** Parses buffered bytes as far as possible (call again when the owner has room for a head). */
  run(): void {
    // HOT
    if (this.running) return;
    this.running = true;
    try {
      this.loop();
    } finally {
      this.running = false;
    }
  }

  private loop(): void {
    // HOT
    for (;;) {
      const buf = this.buf;
      if (buf === null || this.state === S_DEAD) return;
      if (this.pos >= buf.length) {
        this.buf = null;
        return;
      }
      let progressed: boolean;
      switch (this.state) {
        case S_HEAD:
          progressed = this.head(buf);
          break;
        case S_LENGTH:
          progressed = this.lengthBody(buf);
          break;
        case S_CHUNK_SIZE:
          progressed = this.chunkSize(buf);
          break;
        case S_CHUNK_DATA:
          progressed = this.chunkData(buf);
          break;
        case S_CHUNK_CRLF:
          progressed = this.chunkCrlf(buf);
          break;
        default:
          progressed = this.trailer(buf);
      }
      if (!progressed) return;
    }
  }

  private fail(kind: ErrorKind, message: string): false {
    this.stop();
    this.owner.onParseError(kind, message);
    return false;
  }

  private head(buf: Buffer): boolean {
    // HOT
    let pos = this.pos;
    // RFC 9112 §2.2: empty lines before a request line are ignored.
    while (pos + 1 < buf.length && buf[pos] === CR && buf[pos + 1] === LF) pos += 2;
    this.pos = pos;
    if (pos >= buf.length) return true;
    if (!this.owner.readyForHead()) return false;
    if (this.scanned <= pos) this.owner.onHeadStart();
    const from = this.scanned > pos + 3 ? this.scanned - 3 : pos;
    const end = buf.indexOf(CRLFCRLF, from);
    if (end < 0) return this.incompleteHead(buf, from);
    this.scanned = 0;
    return this.parseHead(buf, pos, end + 2);
  }

  /** No end of head yet: refuse what can never become a valid head, else wait for more bytes. */
  private incompleteHead(buf: Buffer, from: number): false {
    const pos = this.pos;
    for (let i = buf.indexOf(LF, from); i >= 0; i = buf.indexOf(LF, i + 1)) {
      if (i === pos || buf[i - 1] !== CR)
        return this.fail(Errors.badFraming, 'malformed request framing: a line ends with a bare LF');
    }
    this.scanned = buf.length;
    const size = buf.length - pos;
    const lineEnd = buf.indexOf(LF, pos);
    if (lineEnd < 0 ? size > this.maxRequestLine : lineEnd - pos > this.maxRequestLine)
      return this.fail(Errors.urlTooLong, `request line longer than ${this.maxRequestLine} bytes`);
    if (size > this.maxHead)
      return this.fail(Errors.headersTooLarge, `request head longer than ${this.maxHead} bytes`);
    return false;
  }

  /** Parses the head in `buf[start, end)` (`end` is after the last field line's CRLF). */
  private parseHead(buf: Buffer, start: number, end: number): boolean {
    // HOT
    const lineEnd = buf.indexOf(LF, start) - 1; // the CR of the request line
    if (buf[lineEnd] !== CR)
      return this.fail(Errors.badFraming, 'malformed request framing: a line ends with a bare LF');
    if (lineEnd - start > this.maxRequestLine)
      return this.fail(Errors.urlTooLong, `request line longer than ${this.maxRequestLine} bytes`);
    if (end - start > this.maxHead)
      return this.fail(Errors.headersTooLarge, `request head longer than ${this.maxHead} bytes`);
    if (!this.requestLine(buf, start, lineEnd)) return false;
    let at = lineEnd + 2;
    while (at < end) {
      const le = buf.indexOf(LF, at) - 1;
      if (buf[le] !== CR)
        return this.fail(Errors.badFraming, 'malformed request framing: a line ends with a bare LF');
      if (!this.fieldLine(buf, at, le, true)) return false;
      at = le + 2;
    }
    this.pos = end + 2;
    const body = this.owner.onHead();
    if (body === STOP) {
      this.stop();
      return false;
    }
    if (body === BODY_NONE) return true;
    if (body === BODY_CHUNKED) this.state = S_CHUNK_SIZE;
    else {
      this.state = S_LENGTH;
      this.remaining = body;
    }
    return true;
  }

  /** `method SP request-target SP HTTP-version` in `buf[start, end)` (RFC 9112 §3). */
  private requestLine(buf: Buffer, start: number, end: number): boolean {
    // HOT
    let i = start;
    while (i < end && TCHAR[buf[i]!] === 1) i++;
    if (i === start || buf[i] !== SP)
      return this.fail(Errors.badFraming, 'malformed request framing: invalid request method');
    const method = buf.toString('latin1', start, i);
    const ts = ++i;
    while (i < end && buf[i] !== SP) {
      if (TARGET[buf[i]!] !== 1)
        return this.fail(
          Errors.badFraming,
          'malformed request framing: invalid character in the request target',
        );
      i++;
    }
    if (i === ts || i !== end - 9)
      return this.fail(Errors.badFraming, 'malformed request framing: invalid request line');
    // HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3), case-sensitive.
    if (
      buf[i + 1] !== 0x48 ||
      buf[i + 2] !== 0x54 ||
      buf[i + 3] !== 0x54 ||
      buf[i + 4] !== 0x50 ||
      buf[i + 5] !== 0x2f ||
      buf[i + 7] !== 0x2e
    )
      return this.fail(Errors.badFraming, 'malformed request framing: invalid HTTP version');
    const major = buf[i + 6]! - 0x30;
    const minor = buf[i + 8]! - 0x30;
    if (major < 0 || major > 9 || minor < 0 || minor > 9)
      return this.fail(Errors.badFraming, 'malformed request framing: invalid HTTP version');
    // A higher minor version of HTTP/1 is served as 1.1 (RFC 9110 §6.2); other majors are not HTTP/1.
    if (major !== 1)
      return this.fail(
        Errors.httpVersion,
        `HTTP/${major}.${minor} is not supported on this listener; use HTTP/1.1`,
      );
    return this.target(method, buf.toString('latin1', ts, i), minor === 0);
  }

  /** The request target's form (RFC 9112 §3.2): origin, absolute, asterisk (OPTIONS), authority (CONNECT). */
  private target(method: string, target: string, http10: boolean): boolean {
    // HOT
    let path = target;
    let authority = '';
    if (target.charCodeAt(0) !== 0x2f) {
      if (method === 'CONNECT' || (target === '*' && method === 'OPTIONS')) {
        beginHead(method, target, '', http10);
        return true;
      }
      if (!ABSOLUTE_FORM.test(target))
        return this.fail(Errors.badFraming, 'malformed request framing: invalid request target');
      const from = target.indexOf('//') + 2;
      let stop = from;
      while (stop < target.length) {
        const c = target.charCodeAt(stop);
        if (c === 0x2f || c === 0x3f) break;
        stop++;
      }
      authority = target.slice(from, stop);
      if (authority === '')
        return this.fail(Errors.badFraming, 'malformed request framing: absolute-form target without a host');
      path = target.slice(stop);
      if (path === '' || path.charCodeAt(0) === 0x3f) path = `/${path}`;
    }
    const q = path.indexOf('?');
    if (q < 0) beginHead(method, path, '', http10);
    else beginHead(method, path.slice(0, q), path.slice(q + 1), http10);
    if (authority !== '') useTargetAuthority(authority);
    return true;
  }

  /**
   * `field-name ":" OWS field-value OWS` in `buf[start, end)` (RFC 9112 §5). Adds it to the head,
   * or (a trailer field) only checks it.
   */
  private fieldLine(buf: Buffer, start: number, end: number, add: boolean): boolean {
    // HOT
    const first = buf[start];
    if (first === SP || first === HTAB)
      return this.fail(Errors.badFraming, 'malformed request framing: obsolete line folding');
    let i = start;
    let upper = false;
    for (; i < end; i++) {
      const c = buf[i]!;
      if (TCHAR[c] !== 1) break;
      if (c >= 0x41 && c <= 0x5a) upper = true;
    }
    if (i === start || buf[i] !== COLON) {
      const c = buf[i];
      return this.fail(
        Errors.badFraming,
        c === SP || c === HTAB
          ? 'malformed request framing: whitespace between a header name and its colon'
          : 'malformed request framing: invalid header name',
      );
    }
    const nameEnd = i;
    i++;
    while (i < end && (buf[i] === SP || buf[i] === HTAB)) i++;
    let ve = end;
    while (ve > i && (buf[ve - 1] === SP || buf[ve - 1] === HTAB)) ve--;
    for (let j = i; j < ve; j++) {
      if (FIELD[buf[j]!] !== 1)
        return this.fail(Errors.badFraming, 'malformed request framing: invalid character in a header value');
    }
    if (!add) return true;
    const name = buf.toString('latin1', start, nameEnd);
    addHeader(upper ? name.toLowerCase() : name, buf.toString('latin1', i, ve));
    return true;
  }

  private lengthBody(buf: Buffer): boolean {
    // HOT
    if (this.take(buf, S_HEAD) && this.state === S_HEAD) this.owner.onBodyEnd();
    return this.state !== S_DEAD;
  }

  /**
   * Hands the owner the next body bytes, up to `remaining`; when they are all there, moves to
   * `next` (before the owner's callback, which may stop the parser). True when `remaining` is 0.
   */
  private take(buf: Buffer, next: number): boolean {
    // HOT
    const avail = buf.length - this.pos;
    const n = avail < this.remaining ? avail : this.remaining;
    const chunk = buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    this.remaining -= n;
    const done = this.remaining === 0;
    if (done) this.state = next;
    this.owner.onBodyData(chunk);
    return done;
  }

  /** `chunk-size [ chunk-ext ] CRLF` (RFC 9112 §7.1); extensions are checked and ignored. */
  private chunkSize(buf: Buffer): boolean {
    const pos = this.pos;
    const lf = buf.indexOf(LF, pos);
    if ((lf < 0 ? buf.length : lf) - pos > MAX_CHUNK_LINE)
      return this.fail(Errors.badFraming, 'malformed request framing: chunk size line too long');
    if (lf < 0) return false;
    const end = lf - 1;
    if (end < pos || buf[end] !== CR)
      return this.fail(Errors.badFraming, 'malformed request framing: a line ends with a bare LF');
    let size = 0;
    let i = pos;
    for (; i < end; i++) {
      const d = HEX[buf[i]!]!;
      if (d < 0) break;
      size = size * 16 + d;
    }
    if (i === pos || i - pos > 12)
      return this.fail(Errors.badFraming, 'malformed request framing: invalid chunk size');
    if (i < end) {
      let j = i;
      while (j < end && (buf[j] === SP || buf[j] === HTAB)) j++;
      if (buf[j] !== SEMICOLON)
        return this.fail(Errors.badFraming, 'malformed request framing: invalid chunk size');
      if (!validChunkExtensions(buf, j, end))
        return this.fail(Errors.badFraming, 'malformed request framing: invalid chunk extension');
    }
    this.pos = lf + 1;
    if (size === 0) {
      this.state = S_TRAILER;
      this.trailerBytes = 0;
    } else {
      this.state = S_CHUNK_DATA;
      this.remaining = size;
    }
    return true;
  }

  private chunkData(buf: Buffer): boolean {
    // HOT
    this.take(buf, S_CHUNK_CRLF);
    return this.state !== S_DEAD;
  }

  private chunkCrlf(buf: Buffer): boolean {
    if (buf.length - this.pos < 2) {
      if (buf[this.pos] !== CR)
        return this.fail(Errors.badFraming, 'malformed request framing: chunk data not followed by CRLF');
      return false;
    }
    if (buf[this.pos] !== CR || buf[this.pos + 1] !== LF)
      return this.fail(Errors.badFraming, 'malformed request framing: chunk data not followed by CRLF');
    this.pos += 2;
    this.state = S_CHUNK_SIZE;
    return true;
  }

  /** `*( field-line CRLF ) CRLF` after the last chunk (RFC 9112 §7.1.2); fields are checked and dropped. */
  private trailer(buf: Buffer): boolean {
    const pos = this.pos;
    const lf = buf.indexOf(LF, pos);
    if (lf < 0) {
      if (this.trailerBytes + buf.length - pos > this.maxTrailer)
        return this.fail(Errors.headersTooLarge, `trailer fields longer than ${this.maxTrailer} bytes`);
      return false;
    }
    const end = lf - 1;
    if (end < pos || buf[end] !== CR)
      return this.fail(Errors.badFraming, 'malformed request framing: a line ends with a bare LF');
    this.pos = lf + 1;
    if (end === pos) {
      this.state = S_HEAD;
      this.owner.onBodyEnd();
      return this.state !== S_DEAD;
    }
    this.trailerBytes += lf + 1 - pos;
    if (this.trailerBytes > this.maxTrailer)
      return this.fail(Errors.headersTooLarge, `trailer fields longer than ${this.maxTrailer} bytes`);
    return this.fieldLine(buf, pos, end, false);
  }
}

/**
 * True when `buf[from, end)` is `chunk-ext` exactly (RFC 9112 §7.1.1): `*( BWS ";" BWS name [ BWS
 * "=" BWS value ] )`, a name a token, a value a token or a quoted-string. A lax reading (an empty
 * name, a bare `=`) is where parsers in a chain disagree on where a chunk ends.
 */
function validChunkExtensions(buf: Buffer, from: number, end: number): boolean {
  let j = from;
  const bws = (): void => {
    while (j < end && (buf[j] === SP || buf[j] === HTAB)) j++;
  };
  const token = (): boolean => {
    const start = j;
    while (j < end && TCHAR[buf[j]!] === 1) j++;
    return j > start;
  };
  while (j < end) {
    bws();
    if (buf[j] !== SEMICOLON) return false;
    j++;
    bws();
    if (!token()) return false;
    bws();
    if (j < end && buf[j] === EQUALS) {
      j++;
      bws();
      if (buf[j] === DQUOTE) {
        // quoted-string: qdtext or quoted-pair up to the closing quote (RFC 9110 §5.6.4).
        for (j++; buf[j] !== DQUOTE; j++) {
          if (buf[j] === BACKSLASH) j++;
          if (j >= end || FIELD[buf[j]!] !== 1) return false;
        }
        j++;
      } else if (!token()) return false;
    }
  }
  return true;
}
