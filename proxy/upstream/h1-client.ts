/**
 * Sluice's HTTP/1.1 client for plain-HTTP nodes: keep-alive connections to one origin, one request
 * at a time per connection, the request head written as one latin1 string, the response head and
 * body parsed in place from the socket's buffers (no copies, no per-header callbacks). It speaks
 * undici's raw dispatch-handler interface (`UpstreamHandler`), so the lifecycle does not know which
 * client carries an attempt; `https:` nodes stay on undici. It never decides where a request goes,
 * never retries, and keeps no deadline of its own except the connect timeout and the optional
 * per-call `ttfbMs`/`idleMs` (the session's attempts keep theirs in their route's deadline lists).
 *
 * ```
 *   dispatch ─▶ idle connection? ──yes──▶ write head+body ─▶ parse head ─▶ body ─▶ complete
 *                  │ no                                                             │ keep-alive
 *                  ▼                                                                ▼
 *              queue (FIFO) ◀── a connection frees ◀────────────────────────── idle stack (LIFO)
 *                  │ below `connections`: open one
 * ```
 */
import net from 'node:net';
import { nowMs } from '../lifecycle/clock.js';

/**
 * What receives one exchange's events (undici's raw handler interface). `onConnect` comes when the
 * request is handed to a connection, before it is written; then `onHeaders` once (final answer;
 * informational ones are skipped), `onData` per body piece, and `onComplete` or `onError` exactly
 * once. `onError` may also come without `onConnect` (the connection could not be opened, the
 * request could not be sent as it is). A `false` from `onHeaders` or `onData` pauses the body until
 * `resume` is called. `abort` ends the exchange at once with `onError(reason)`.
 */
export interface UpstreamHandler {
  onConnect(abort: (reason: Error) => void): void;
  /** `statusText` is always '' from H1Client (the reason phrase is checked, not decoded). */
  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(trailers: string[] | null): void;
  onError(err: Error): void;
}

/** One exchange as the caller describes it. */
export interface UpstreamRequest {
  method: string;
  /** Path with query string. */
  path: string;
  /** Flat `[name, value, ...]`, without hop-by-hop headers, Host or Content-Length. */
  headers: readonly string[];
  body: Buffer | null;
  /** Time from writing the request to the response head, ms; 0: none. */
  ttfbMs: number;
  /** Longest gap between body pieces, ms; 0: none. */
  idleMs: number;
}

/** Error codes of the client (transport errors of the socket keep their errno code: ECONNREFUSED, ECONNRESET, ...). */
export const H1ErrorCode = {
  /** The node closed the connection before the answer was complete. */
  closed: 'SLUICE_UPSTREAM_CLOSED',
  /** The TCP connection was not established within the connect timeout. */
  connectTimeout: 'SLUICE_UPSTREAM_CONNECT_TIMEOUT',
  /** The node's answer is not valid HTTP/1.1 (or breaks a framing rule). */
  protocol: 'SLUICE_UPSTREAM_PROTOCOL',
  /** The request cannot be written as it is (a control byte in a header, a non-token method). */
  invalidRequest: 'SLUICE_UPSTREAM_INVALID_REQUEST',
  /** No response head within the call's `ttfbMs`. */
  headersTimeout: 'SLUICE_UPSTREAM_HEADERS_TIMEOUT',
  /** No body piece within the call's `idleMs`. */
  bodyTimeout: 'SLUICE_UPSTREAM_BODY_TIMEOUT',
  /** The client was closed or destroyed before the exchange could run. */
  closedClient: 'SLUICE_UPSTREAM_CLIENT_CLOSED',
} as const;

/** A failure of the client, with a stable `code` (H1ErrorCode). */
export class H1Error extends Error {
  readonly code: string;
  constructor(code: string, message: string, cause?: Error) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'H1Error';
    this.code = code;
  }
}

/** Options of an H1Client. */
export interface H1ClientOptions {
  /** Most connections (each carries one exchange at a time); 0: no cap, beyond it requests queue. */
  connections: number;
  /** TCP connect timeout, ms. */
  connectTimeoutMs: number;
  /** How long an idle connection is kept when the node names no shorter `Keep-Alive: timeout`, ms. */
  keepAliveMs?: number;
  /** Longest response head accepted, bytes (status line and fields). Default 16 KiB, as Node's. */
  maxHeadBytes?: number;
}

/** A request method is a token (RFC 9110 §9.1). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** A token in lower case: what every header name Sluice forwards is. */
const LOWER_TOKEN = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
/** Field values: HTAB, visible ASCII, space and obs-text; never CR, LF or NUL (RFC 9110 §5.5). */
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
/** A request target in origin form: visible ASCII only (no control bytes, DEL, spaces or bytes above 0x7E). */
const BAD_PATH = /[^\x21-\x7e]/;
/** Methods whose request has content semantics: an empty body is still sent with `content-length: 0`. */
const EXPECTS_BODY = new Set(['POST', 'PUT', 'PATCH', 'QUERY']);
/** Headers the client writes itself. */
const OWN_HEADERS = new Set(['host', 'content-length', 'connection', 'transfer-encoding', 'keep-alive']);

const CR = 13;
const LF = 10;
const COLON = 58;
const SP = 32;
const HTAB = 9;
const SEMI = 59;
/** Leeway taken off a node's `Keep-Alive: timeout`, ms: a connection is never reused in the last moment before the node closes it. */
const KEEP_ALIVE_LEEWAY_MS = 1000;
/** Longest chunk-size line (size and extensions) or trailer section accepted, bytes. */
const MAX_CHUNK_LINE = 4096;
/** How often idle connections past their keep-alive are closed, ms. */
const SWEEP_MS = 1000;

/** Parser states of a connection. */
const St = {
  idle: 0,
  head: 1,
  length: 2,
  chunkSize: 3,
  chunkData: 4,
  chunkCrlf: 5,
  trailers: 6,
  untilClose: 7,
} as const;
type St = (typeof St)[keyof typeof St];

/** One exchange inside the client. */
class Exchange {
  readonly handler: UpstreamHandler;
  /** The connection running it; null before it started and once it ended. */
  conn: H1Connection | null = null;
  /**
   * Given to the handler: they act on this exchange only, so a handler that calls them late (its
   * exchange over, the connection serving another) changes nothing.
   */
  readonly abort: (reason: Error) => void;
  readonly resume: () => void;
  /** The request head, serialised once at dispatch. */
  readonly head: string;
  readonly body: Buffer | null;
  readonly isHead: boolean;
  readonly ttfbMs: number;
  readonly idleMs: number;
  constructor(
    handler: UpstreamHandler,
    head: string,
    body: Buffer | null,
    isHead: boolean,
    req: UpstreamRequest,
  ) {
    this.handler = handler;
    this.head = head;
    this.body = body;
    this.isHead = isHead;
    this.ttfbMs = req.ttfbMs;
    this.idleMs = req.idleMs;
    this.abort = (reason) => this.conn?.abortExchange(this, reason);
    this.resume = () => this.conn?.resumeExchange(this);
  }
}

/** A keep-alive connection pool to one `http:` origin. */
export class H1Client {
  readonly host: string;
  readonly port: number;
  /** The Host header value (`host:port` as in the URL). */
  readonly authority: string;
  private readonly maxConnections: number;
  readonly connectTimeoutMs: number;
  private readonly keepAliveMs: number;
  readonly maxHeadBytes: number;
  /** Connections open or opening. */
  private open = 0;
  /** Of those, connections still opening. */
  private connecting = 0;
  /** Connections opened since start (attempts, whether they came up or not). */
  opened = 0;
  /** Connections waiting for work, most recently used last. */
  private readonly idle: H1Connection[] = [];
  /** Exchanges waiting for a connection, oldest at `queueHead`. */
  private queue: (Exchange | null)[] = [];
  private queueHead = 0;
  private sweepTimer: NodeJS.Timeout | null = null;
  private closing = false;
  private destroyed = false;
  /** settleClose is running. */
  private settling = false;
  /** Exchanges running on a connection. */
  private running = 0;
  private closeWaiters: (() => void)[] = [];
  /** Every open or opening connection (so `destroy` reaches the busy ones). */
  readonly conns = new Set<H1Connection>();

  /** `origin`: `http://host:port`. */
  constructor(origin: string, options: H1ClientOptions) {
    const u = new URL(origin);
    if (u.protocol !== 'http:') throw new Error(`H1Client serves http: origins only, not ${u.protocol}`);
    this.host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
    this.port = u.port === '' ? 80 : Number(u.port);
    this.authority = u.host;
    this.maxConnections = options.connections > 0 ? options.connections : Infinity;
    this.connectTimeoutMs = options.connectTimeoutMs;
    this.keepAliveMs = options.keepAliveMs ?? 30_000;
    this.maxHeadBytes = options.maxHeadBytes ?? 16 * 1024;
  }

  /**
   * Sends one exchange. Never throws: a request that cannot be written as it is, or a client
   * already closing, gets `onError` at once (before this returns).
   */
  dispatch(req: UpstreamRequest, handler: UpstreamHandler): void {
    // HOT
    if (this.closing || this.destroyed) {
      handler.onError(new H1Error(H1ErrorCode.closedClient, 'the upstream client is closed'));
      return;
    }
    const head = this.serialise(req);
    if (typeof head !== 'string') {
      handler.onError(head);
      return;
    }
    const ex = new Exchange(handler, head, req.body, req.method === 'HEAD', req);
    const conn = this.idle.length > 0 ? this.freshIdle() : null;
    if (conn !== null) {
      this.running++;
      conn.startSoon(ex);
      return;
    }
    this.queue.push(ex);
    this.refill();
  }

  /**
   * The most recently used idle connection still within its keep-alive, or null; older ones past
   * it are closed on the way (the sweep runs only once a second: a node that closes at its own
   * timeout must not get a request in the same moment).
   */
  private freshIdle(): H1Connection | null {
    // HOT
    const now = nowMs();
    const idle = this.idle;
    while (idle.length > 0) {
      const c = idle.pop()!;
      c.inIdle = false;
      if (now - c.idleSinceMs < Math.min(this.keepAliveMs, c.keepAliveHintMs)) return c;
      c.close();
    }
    return null;
  }

  /** Puts back an exchange whose connection closed before it was written: it is served first. */
  requeue(ex: Exchange): void {
    if (this.destroyed) {
      ex.handler.onError(new H1Error(H1ErrorCode.closedClient, 'the upstream client was destroyed'));
      return;
    }
    if (this.queueHead > 0) this.queue[--this.queueHead] = ex;
    else this.queue.unshift(ex);
    this.refill();
  }

  /** The request head as one string, or the reason it cannot be sent. */
  private serialise(req: UpstreamRequest): string | H1Error {
    // HOT
    const method = req.method;
    if (!TOKEN.test(method)) return new H1Error(H1ErrorCode.invalidRequest, `invalid request method`);
    const path = req.path;
    if (path.length === 0 || BAD_PATH.test(path))
      return new H1Error(H1ErrorCode.invalidRequest, 'invalid request path');
    let head = `${method} ${path} HTTP/1.1\r\nhost: ${this.authority}\r\nconnection: keep-alive\r\n`;
    const h = req.headers;
    for (let i = 0; i + 1 < h.length; i += 2) {
      const name = h[i]!;
      const value = h[i + 1]!;
      let lower = name;
      if (!LOWER_TOKEN.test(name)) {
        if (!TOKEN.test(name)) return new H1Error(H1ErrorCode.invalidRequest, `invalid header name`);
        lower = name.toLowerCase();
      }
      if (BAD_VALUE.test(value))
        return new H1Error(H1ErrorCode.invalidRequest, `invalid value of header ${name}`);
      // Whatever its case: a second Host or framing header would desync the node.
      if (OWN_HEADERS.has(lower)) continue;
      head += `${name}: ${value}\r\n`;
    }
    const body = req.body;
    if (body !== null && body.length > 0) head += `content-length: ${body.length}\r\n\r\n`;
    else if (EXPECTS_BODY.has(method)) head += 'content-length: 0\r\n\r\n';
    else head += '\r\n';
    return head;
  }

  /** Opens a connection; a `spare` one is opened for no particular exchange (see `replaceAborted`). */
  private connect(spare = false): void {
    this.open++;
    this.opened++;
    this.connecting++;
    new H1Connection(this, spare);
  }

  /** A connection came up. */
  connected(conn: H1Connection): void {
    this.connecting--;
    this.ready(conn);
  }

  /** A connection came up or finished an exchange and may be reused: gives it the oldest waiting exchange or parks it. */
  ready(conn: H1Connection): void {
    // HOT
    const ex = this.nextQueued();
    if (ex !== null) {
      this.running++;
      conn.startSoon(ex);
      return;
    }
    this.park(conn);
  }

  /** The oldest waiting exchange for a connection whose exchange was aborted before it was written (counted as running), or null with the connection parked. */
  takeNext(conn: H1Connection): Exchange | null {
    const ex = this.nextQueued();
    if (ex !== null) {
      this.running++;
      return ex;
    }
    this.park(conn);
    return null;
  }

  private park(conn: H1Connection): void {
    if (this.closing) {
      conn.close();
      return;
    }
    conn.idleSinceMs = nowMs();
    conn.inIdle = true;
    this.idle.push(conn);
    if (this.sweepTimer === null) {
      this.sweepTimer = setInterval(sweep, SWEEP_MS, this);
      this.sweepTimer.unref();
    }
  }

  finished(): void {
    this.running--;
    if (this.closing && this.running === 0 && this.queueLength() === 0) this.settleClose();
  }

  /**
   * A connection could not be opened: the oldest waiting exchange fails with `err`. When no other
   * connection is up or coming up, every exchange waiting now fails with it (the next connect
   * would most likely fail the same way, and each would wait its own connect timeout first).
   * A spare connection's failure fails nothing: it was opened ahead of need, and waiting exchanges
   * get connections of their own instead.
   */
  connectFailed(err: Error, spare: boolean): void {
    this.open--;
    this.connecting--;
    if (spare) {
      this.refill();
      if (this.closing && this.running === 0 && this.queueLength() === 0) this.settleClose();
      return;
    }
    const ex = this.nextQueued();
    if (ex !== null) ex.handler.onError(err);
    if (this.open === 0) {
      // Only those waiting now: a handler may send another request from onError.
      for (let n = this.queueLength(); n > 0; n--) this.nextQueued()!.handler.onError(err);
    } else this.refill();
    if (this.closing && this.running === 0 && this.queueLength() === 0) this.settleClose();
  }

  /**
   * Opens a connection in place of one closed because its caller aborted an exchange already
   * written, within the cap; it serves the oldest waiting exchange when it comes up, or is parked.
   */
  replaceAborted(): void {
    if (this.closing || this.destroyed || this.open >= this.maxConnections) return;
    this.connect(true);
  }

  /** A connection closed (after use, or while idle). */
  gone(conn: H1Connection): void {
    this.open--;
    if (conn.inIdle) {
      conn.inIdle = false;
      const i = this.idle.lastIndexOf(conn);
      if (i >= 0) this.idle.splice(i, 1);
    }
    this.refill();
  }

  /**
   * Opens connections while more exchanges wait than connections are opening, within the cap: a
   * connection that comes up serves the oldest waiting exchange, whichever one it was opened for.
   */
  private refill(): void {
    while (this.queueLength() > this.connecting && this.open < this.maxConnections && !this.destroyed)
      this.connect();
  }

  private queueLength(): number {
    return this.queue.length - this.queueHead;
  }

  private nextQueued(): Exchange | null {
    // HOT
    if (this.queueHead >= this.queue.length) return null;
    const ex = this.queue[this.queueHead]!;
    this.queue[this.queueHead++] = null;
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    } else if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
    return ex;
  }

  /** Closes idle connections past their keep-alive. */
  sweepIdle(): void {
    const now = nowMs();
    const idle = this.idle;
    let kept = 0;
    for (let i = 0; i < idle.length; i++) {
      const c = idle[i]!;
      if (now - c.idleSinceMs >= Math.min(this.keepAliveMs, c.keepAliveHintMs)) {
        c.inIdle = false;
        c.close();
      } else idle[kept++] = c;
    }
    idle.length = kept;
    if (this.idle.length === 0 && this.sweepTimer !== null) {
      clearInterval(this.sweepTimer);
      this.sweepTimer = null;
    }
  }

  /** Waits for queued and running exchanges to finish, then closes every connection. */
  close(): Promise<void> {
    this.closing = true;
    if (this.running === 0 && this.queueLength() === 0) {
      this.settleClose();
      return Promise.resolve();
    }
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  /** Closes every connection now; running and queued exchanges fail. */
  destroy(): Promise<void> {
    this.closing = true;
    this.destroyed = true;
    const err = new H1Error(H1ErrorCode.closedClient, 'the upstream client was destroyed');
    for (let ex = this.nextQueued(); ex !== null; ex = this.nextQueued()) ex.handler.onError(err);
    for (const c of [...this.conns]) c.fail(err);
    this.settleClose();
    return Promise.resolve();
  }

  private settleClose(): void {
    // Closing a connection still opening comes back here (connectFailed): once is enough.
    if (this.settling) return;
    this.settling = true;
    for (const c of this.idle.splice(0)) {
      c.inIdle = false;
      c.close();
    }
    // Connections still opening carry nothing (a spare, or one whose exchange went elsewhere):
    // none may reach the node after close() resolved.
    for (const c of [...this.conns]) if (c.opening) c.close();
    this.settling = false;
    if (this.sweepTimer !== null) clearInterval(this.sweepTimer);
    this.sweepTimer = null;
    const waiters = this.closeWaiters;
    this.closeWaiters = [];
    for (const w of waiters) w();
  }

  /** Connections open or opening (for tests and metrics). */
  get connections(): number {
    return this.open;
  }

  /** Connections up and idle (for tests). */
  get idleConnections(): number {
    return this.idle.length;
  }
}

function sweep(client: H1Client): void {
  client.sweepIdle();
}

function onConnectTimeout(conn: H1Connection): void {
  conn.connectTimedOut();
}

function onExchangeTimeout(conn: H1Connection): void {
  conn.exchangeTimedOut();
}

/**
 * Connections given an exchange in this turn of the event loop, written in the loop's check phase
 * (one `setImmediate` for all of them). A uWS listener may still refuse the connection a request
 * came on after its handler ran (its parser failing on the bytes behind the request, as with a
 * trailer after the last chunk): the session then abandons the attempt before it is written, and
 * the node never sees a request its client was told failed.
 */
const starting: H1Connection[] = [];

/** Where every connection's socket reads land (see the H1Connection constructor). */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);
let startScheduled = false;

function runStarts(): void {
  startScheduled = false;
  // Starts may queue more (a connection handed back at once): this batch only.
  const n = starting.length;
  let i = 0;
  try {
    for (; i < n; i++) starting[i]!.startPending();
  } finally {
    // A handler that threw leaves the rest of the batch to the next check phase.
    starting.splice(0, i < n ? i + 1 : n);
    if (starting.length > 0 && !startScheduled) {
      startScheduled = true;
      setImmediate(runStarts);
    }
  }
}

/** One TCP connection and the parser of the answers on it. */
class H1Connection {
  private readonly client: H1Client;
  private readonly socket: net.Socket;
  private connected = false;
  private connectTimer: NodeJS.Timeout | null;
  /** The exchange on the connection; null while idle. */
  private ex: Exchange | null = null;
  /**
   * Where the parser stands. After a head, `length` with `remaining` 0 is an answer whose body is
   * complete (or empty) and whose end is not yet handed over (the handler paused).
   */
  private state: St = St.idle;
  /** Bytes of an incomplete head, chunk-size line or trailer section carried to the next read. */
  private carry: Buffer | null = null;
  /** Body bytes left in the current length-delimited body or chunk (CRLF bytes seen after a chunk). */
  private remaining = 0;
  /** The node lets the connection be reused after this answer. */
  private keepAlive = true;
  /** The handler asked for no more body until `resume`. */
  private paused = false;
  /** Bytes read while paused, parsed on resume. */
  private held: Buffer | null = null;
  /** The socket is not being read (the handler paused). */
  private socketPaused = false;
  /** True while `feed` runs (a resume from inside a callback only clears `paused`). */
  private feeding = false;
  /** The node closed its side (or the socket closed). */
  private eof = false;
  private closed = false;
  /** The exchange's ttfb or body-gap timer (calls with `ttfbMs`/`idleMs` only). */
  private timer: NodeJS.Timeout | null = null;
  /** When the connection went idle, monotonic ms. */
  idleSinceMs = 0;
  /** True while in its client's idle list. */
  inIdle = false;
  /** The node's `Keep-Alive: timeout`, less leeway, ms (Infinity when it named none). */
  keepAliveHintMs = Infinity;
  /** An exchange given to the connection and not yet started (see `starting`). */
  private pending: Exchange | null = null;
  /** The current exchange's request was handed to the socket. */
  private written = false;

  /** Opened ahead of need (see H1Client.replaceAborted). */
  readonly spare: boolean;

  constructor(client: H1Client, spare: boolean) {
    this.client = client;
    this.spare = spare;
    client.conns.add(this);
    // Read through `onread`, not 'data' events: each read lands in one shared buffer and is copied
    // out at its size, without the stream machinery's per-read work (a push, an event, a tick).
    const s = net.connect({
      host: client.host,
      port: client.port,
      noDelay: true,
      onread: { buffer: READ_BUFFER, callback: (n: number) => this.onSocketRead(n) },
    });
    this.socket = s;
    this.connectTimer =
      client.connectTimeoutMs > 0 ? setTimeout(onConnectTimeout, client.connectTimeoutMs, this) : null;
    s.on('connect', () => this.onConnected());
    s.on('end', () => this.onEof());
    s.on('error', (e: Error) => this.onSocketError(e));
    s.on('close', () => this.onEof());
  }

  /** Not yet connected, and not closed. */
  get opening(): boolean {
    return !this.connected && !this.closed;
  }

  private onConnected(): void {
    if (this.closed) return;
    this.connected = true;
    if (this.connectTimer !== null) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    this.client.connected(this);
  }

  connectTimedOut(): void {
    this.connectTimer = null;
    if (this.connected || this.closed) return;
    this.closed = true;
    this.client.conns.delete(this);
    this.socket.destroy();
    this.client.connectFailed(
      new H1Error(
        H1ErrorCode.connectTimeout,
        `timed out connecting to ${this.client.authority} after ${this.client.connectTimeoutMs} ms`,
      ),
      this.spare,
    );
  }

  /** Gives `ex` (counted as running by the client) to this idle connection, to be started in the loop's check phase. */
  startSoon(ex: Exchange): void {
    // HOT
    this.pending = ex;
    starting.push(this);
    if (!startScheduled) {
      startScheduled = true;
      setImmediate(runStarts);
    }
  }

  /** Starts the pending exchange (unless the connection closed meanwhile and handed it back). */
  startPending(): void {
    // HOT
    let ex = this.pending;
    if (ex === null) return;
    this.pending = null;
    // An exchange aborted inside onConnect leaves the connection clean: it takes the next one, in
    // a loop (a queue of exchanges given up while they waited must not recurse).
    while (!this.start(ex)) {
      if (this.closed) return;
      const next = this.client.takeNext(this);
      if (next === null) return;
      ex = next;
    }
  }

  /**
   * Starts `ex` (counted as running) on this connection; false when its handler aborted it in
   * onConnect, before anything was written (the connection is then free).
   */
  private start(ex: Exchange): boolean {
    // HOT
    this.ex = ex;
    this.state = St.head;
    this.keepAlive = true;
    this.paused = false;
    this.written = false;
    ex.conn = this;
    ex.handler.onConnect(ex.abort);
    // The handler may have aborted at once (its request was cancelled while it waited): nothing
    // was written, so the connection serves the next exchange.
    if (this.ex !== ex) return false;
    this.written = true;
    const s = this.socket;
    s.cork();
    s.write(ex.head, 'latin1');
    if (ex.body !== null && ex.body.length > 0) s.write(ex.body);
    s.uncork();
    if (ex.ttfbMs > 0) this.timer = setTimeout(onExchangeTimeout, ex.ttfbMs, this);
    return true;
  }

  exchangeTimedOut(): void {
    this.timer = null;
    const ex = this.ex;
    if (ex === null) return;
    if (this.state === St.head)
      this.fail(new H1Error(H1ErrorCode.headersTimeout, 'upstream node sent no response head in time'));
    // A paused body waits on the client, not on the node.
    else if (this.paused && ex.idleMs > 0) this.timer = setTimeout(onExchangeTimeout, ex.idleMs, this);
    else this.fail(new H1Error(H1ErrorCode.bodyTimeout, 'upstream node stopped sending the response body'));
  }

  /**
   * `n` bytes read into READ_BUFFER: copied out (a handler may keep what it is given) into memory
   * of their own, not a slice of Node's shared 8 KiB pool, which a kept chunk would hold whole.
   */
  private onSocketRead(n: number): boolean {
    // HOT
    const d = Buffer.allocUnsafeSlow(n);
    READ_BUFFER.copy(d, 0, 0, n);
    this.onSocketData(d);
    // Not false: that would pause the socket (the parser pauses it itself when a handler asks).
    return true;
  }

  private onSocketData(d: Buffer): void {
    // HOT
    if (this.ex === null) {
      // Bytes nobody asked for: the node broke framing, and the connection cannot be trusted again.
      this.close();
      return;
    }
    if (this.paused) {
      this.held = this.held === null ? d : Buffer.concat([this.held, d]);
      this.pauseSocket();
      return;
    }
    this.feed(d);
  }

  /** Runs the parser over `d` until it is used up, the exchange ends or the handler pauses. */
  private feed(d: Buffer): void {
    // HOT
    const ex = this.ex;
    if (ex === null) return;
    this.feeding = true;
    let at = 0;
    while (this.ex === ex) {
      if (this.paused) {
        this.held = at === 0 ? d : d.subarray(at);
        this.pauseSocket();
        break;
      }
      if (this.state === St.length && this.remaining === 0) {
        this.complete(ex, at < d.length);
        break;
      }
      if (at >= d.length) break;
      switch (this.state) {
        case St.head:
          at = this.readHead(d, at);
          break;
        case St.length:
        case St.chunkData: {
          // Body bytes up to the end of the declared length or of the chunk.
          const n = Math.min(this.remaining, d.length - at);
          const piece = d.subarray(at, at + n);
          at += n;
          this.remaining -= n;
          if (this.remaining === 0 && this.state === St.chunkData) this.state = St.chunkCrlf;
          this.deliver(ex, piece);
          break;
        }
        case St.chunkSize:
          at = this.readChunkSize(d, at);
          break;
        case St.chunkCrlf:
          at = this.readChunkEnd(d, at);
          break;
        case St.trailers:
          at = this.readTrailers(d, at);
          break;
        case St.untilClose: {
          const piece = at === 0 ? d : d.subarray(at);
          at = d.length;
          this.deliver(ex, piece);
          break;
        }
        default:
          at = d.length;
      }
    }
    this.feeding = false;
  }

  private deliver(ex: Exchange, piece: Buffer): void {
    // HOT
    if (piece.length === 0) return;
    if (this.timer !== null) this.timer.refresh();
    if (!ex.handler.onData(piece)) this.paused = true;
  }

  /** Reads the response head from `d` at `at`; returns where the body starts (d.length while incomplete). */
  private readHead(d: Buffer, at: number): number {
    // HOT
    let buf: Buffer;
    let base: number;
    let searchFrom: number;
    if (this.carry !== null) {
      const prior = this.carry.length;
      buf = Buffer.concat([this.carry, at === 0 ? d : d.subarray(at)]);
      base = 0;
      // The terminator may straddle the two reads.
      searchFrom = prior > 3 ? prior - 3 : 0;
    } else {
      buf = d;
      base = at;
      searchFrom = at;
    }
    const end = buf.indexOf('\r\n\r\n', searchFrom, 'latin1');
    const max = this.client.maxHeadBytes;
    if (end < 0 && buf.indexOf('\n\n', searchFrom > 0 ? searchFrom - 1 : 0, 'latin1') >= 0) {
      // A head ended by bare line feeds: it would never be taken as complete.
      this.fail(protocolError('bare LF line ends in the response head'));
      return d.length;
    }
    if (end < 0) {
      if (buf.length - base > max) {
        this.fail(protocolError(`response head larger than ${max} bytes`));
        return d.length;
      }
      // Copied: the socket's buffer is not kept for a partial head.
      this.carry = buf === d ? Buffer.from(d.subarray(base)) : buf;
      return d.length;
    }
    if (end + 4 - base > max) {
      this.fail(protocolError(`response head larger than ${max} bytes`));
      return d.length;
    }
    this.carry = null;
    // Where the body starts in `d`.
    const next = buf === d ? end + 4 : d.length - (buf.length - (end + 4));
    return this.parseHead(buf, base, end) ? next : d.length;
  }

  /**
   * Parses the status line and fields in `buf[start, end)` (end: the final CRLFCRLF), checks the
   * framing (RFC 9112 §4, §5, §6.3) and hands the head over. False when the exchange ended.
   */
  private parseHead(buf: Buffer, start: number, end: number): boolean {
    // HOT
    const ex = this.ex!;
    // "HTTP/1.x SSS[ reason]"
    if (
      end - start < 12 ||
      buf[start] !== 72 ||
      buf[start + 1] !== 84 ||
      buf[start + 2] !== 84 ||
      buf[start + 3] !== 80 ||
      buf[start + 4] !== 47 ||
      buf[start + 5] !== 49 ||
      buf[start + 6] !== 46 ||
      (buf[start + 7] !== 49 && buf[start + 7] !== 48) ||
      buf[start + 8] !== SP
    ) {
      this.fail(protocolError('the node did not answer with an HTTP/1.x status line'));
      return false;
    }
    const http10 = buf[start + 7] === 48;
    const d0 = buf[start + 9]! - 48;
    const d1 = buf[start + 10]! - 48;
    const d2 = buf[start + 11]! - 48;
    if (d0 < 1 || d0 > 5 || d1 < 0 || d1 > 9 || d2 < 0 || d2 > 9) {
      this.fail(protocolError('invalid status code in the status line'));
      return false;
    }
    const status = d0 * 100 + d1 * 10 + d2;
    const lineEnd = buf.indexOf(CR, start + 12);
    if (
      lineEnd < 0 ||
      lineEnd > end ||
      buf[lineEnd + 1] !== LF ||
      (lineEnd > start + 12 && buf[start + 12] !== SP)
    ) {
      this.fail(protocolError('malformed status line'));
      return false;
    }
    if (hasControlByte(buf, start + 13, lineEnd)) {
      this.fail(protocolError('control byte in the status line'));
      return false;
    }

    const raw: Buffer[] = [];
    let contentLength = -1;
    let chunked = false;
    let closeAfter = http10;
    let pos = lineEnd + 2;
    while (pos < end + 2) {
      const eol = buf.indexOf(CR, pos);
      if (eol < 0 || eol > end || buf[eol + 1] !== LF) {
        this.fail(protocolError('malformed header line'));
        return false;
      }
      const first = buf[pos]!;
      if (first === SP || first === HTAB) {
        this.fail(protocolError('obsolete line folding in a response header'));
        return false;
      }
      // The name: token bytes up to ':', no whitespace before it (RFC 9112 §5.1).
      let colon = pos;
      while (colon < eol && TOKEN_BYTES[buf[colon]!] === 1) colon++;
      if (colon === pos || colon >= eol || buf[colon] !== COLON) {
        this.fail(protocolError('malformed header field name'));
        return false;
      }
      let vs = colon + 1;
      let ve = eol;
      while (vs < ve && (buf[vs] === SP || buf[vs] === HTAB)) vs++;
      while (ve > vs && (buf[ve - 1] === SP || buf[ve - 1] === HTAB)) ve--;
      if (hasControlByte(buf, vs, ve)) {
        this.fail(protocolError('control byte in a response header value'));
        return false;
      }
      const nameLen = colon - pos;
      // The framing fields are read here; every field goes to the handler as sent.
      if (nameLen === 14 && equalsLower(buf, pos, 'content-length')) {
        // One Content-Length of digits only: a list or a repeat is how a response is smuggled.
        const n = parseLength(buf, vs, ve);
        if (n < 0 || contentLength >= 0) {
          this.fail(protocolError('invalid or repeated Content-Length'));
          return false;
        }
        contentLength = n;
      } else if (nameLen === 17 && equalsLower(buf, pos, 'transfer-encoding')) {
        // Only plain `chunked`, once: other codings would reach the client still encoded, and a
        // repeat or a Content-Length beside it is ambiguous framing (RFC 9112 §6.1, §6.3).
        if (chunked || ve - vs !== 7 || !equalsLower(buf, vs, 'chunked')) {
          this.fail(protocolError('Transfer-Encoding other than one plain "chunked"'));
          return false;
        }
        chunked = true;
      } else if (nameLen === 10 && equalsLower(buf, pos, 'connection')) {
        const v = buf.toString('latin1', vs, ve);
        if (CLOSE_TOKEN.test(v)) closeAfter = true;
        else if (http10 && KEEP_ALIVE_TOKEN.test(v)) closeAfter = false;
      } else if (nameLen === 10 && equalsLower(buf, pos, 'keep-alive')) {
        const m = KEEP_ALIVE_TIMEOUT.exec(buf.toString('latin1', vs, ve));
        if (m !== null) this.keepAliveHintMs = Math.max(0, Number(m[1]) * 1000 - KEEP_ALIVE_LEEWAY_MS);
      }
      raw.push(buf.subarray(pos, colon), buf.subarray(vs, ve));
      pos = eol + 2;
    }

    // Informational answers are not the response (RFC 9110 §15.2); 101 would switch protocols.
    if (status < 200) {
      if (status === 101) {
        this.fail(protocolError('the node switched protocols (101), which is not forwarded'));
        return false;
      }
      return true;
    }
    this.keepAlive = !closeAfter;
    if (ex.isHead || status === 204 || status === 304) {
      this.state = St.length;
      this.remaining = 0;
    } else if (chunked) {
      if (contentLength >= 0) {
        this.fail(protocolError('both Content-Length and Transfer-Encoding'));
        return false;
      }
      this.state = St.chunkSize;
    } else if (contentLength < 0) {
      this.state = St.untilClose;
      this.keepAlive = false;
    } else {
      this.state = St.length;
      this.remaining = contentLength;
    }
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = ex.idleMs > 0 ? setTimeout(onExchangeTimeout, ex.idleMs, this) : null;
    // The reason phrase is checked above but not decoded: nothing reads it.
    if (!ex.handler.onHeaders(status, raw, ex.resume, '')) this.paused = true;
    return this.ex === ex;
  }

  /** Reads a chunk-size line (`HEX[;ext]CRLF`, RFC 9112 §7.1). */
  private readChunkSize(d: Buffer, at: number): number {
    // HOT
    const lf = d.indexOf(LF, at);
    if (lf < 0 || this.carry !== null) return this.readChunkSizeSplit(d, at, lf);
    if (lf + 1 - at > MAX_CHUNK_LINE) {
      this.fail(protocolError('chunk size line too long'));
      return d.length;
    }
    const n = parseChunkLine(d, at, lf);
    if (n < 0) {
      this.fail(protocolError('invalid chunk size line'));
      return d.length;
    }
    this.startChunk(n);
    return lf + 1;
  }

  /** A chunk-size line split between reads. */
  private readChunkSizeSplit(d: Buffer, at: number, lf: number): number {
    const piece = lf < 0 ? d.subarray(at) : d.subarray(at, lf + 1);
    const line = this.carry === null ? Buffer.from(piece) : Buffer.concat([this.carry, piece]);
    if (line.length > MAX_CHUNK_LINE) {
      this.fail(protocolError('chunk size line too long'));
      return d.length;
    }
    if (lf < 0) {
      this.carry = line;
      return d.length;
    }
    this.carry = null;
    const n = parseChunkLine(line, 0, line.length - 1);
    if (n < 0) {
      this.fail(protocolError('invalid chunk size line'));
      return d.length;
    }
    this.startChunk(n);
    return lf + 1;
  }

  private startChunk(n: number): void {
    this.remaining = n;
    this.state = n === 0 ? St.trailers : St.chunkData;
  }

  /** Reads the CRLF after a chunk's data; `remaining` counts its bytes already seen. */
  private readChunkEnd(d: Buffer, at: number): number {
    // HOT
    while (at < d.length && this.remaining < 2) {
      if (d[at] !== (this.remaining === 0 ? CR : LF)) {
        this.fail(protocolError('chunk data not followed by CRLF'));
        return d.length;
      }
      at++;
      this.remaining++;
    }
    if (this.remaining === 2) {
      this.remaining = 0;
      this.state = St.chunkSize;
    }
    return at;
  }

  /** Reads (and drops) the trailer fields up to the empty line that ends the message. */
  private readTrailers(d: Buffer, at: number): number {
    // HOT
    const ex = this.ex!;
    const buf = this.carry === null ? d : Buffer.concat([this.carry, d.subarray(at)]);
    const from = this.carry === null ? at : 0;
    let end: number;
    if (buf.length - from >= 2 && buf[from] === CR && buf[from + 1] === LF) {
      // The common case: no trailers.
      end = from + 2;
    } else {
      const t = buf.indexOf('\r\n\r\n', from, 'latin1');
      if (t >= 0 && t + 4 - from > MAX_CHUNK_LINE) {
        this.fail(protocolError('trailer section too long'));
        return d.length;
      }
      if (t < 0) {
        if (buf.length - from > MAX_CHUNK_LINE) {
          this.fail(protocolError('trailer section too long'));
          return d.length;
        }
        this.carry = buf === d ? Buffer.from(d.subarray(from)) : buf;
        return d.length;
      }
      end = t + 4;
    }
    this.carry = null;
    const next = buf === d ? end : d.length - (buf.length - end);
    this.complete(ex, next < d.length);
    return d.length;
  }

  /** The answer is complete. `extra`: bytes followed it (the node broke framing). */
  private complete(ex: Exchange, extra: boolean): void {
    // HOT
    this.ex = null;
    ex.conn = null;
    this.state = St.idle;
    this.carry = null;
    this.held = null;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const reuse = this.keepAlive && !extra && !this.eof && !this.closed;
    this.paused = false;
    if (reuse && this.socketPaused) this.resumeSocket();
    this.client.finished();
    // The connection is back in the pool first, so a request the handler sends from onComplete
    // (the next turn of a conversation, a retry) can take it.
    if (reuse) this.client.ready(this);
    else this.close();
    ex.handler.onComplete(null);
  }

  /** Fails the current exchange with `err` and closes the connection. */
  fail(err: Error): void {
    const ex = this.ex;
    this.ex = null;
    this.close();
    if (ex === null) return;
    ex.conn = null;
    this.client.finished();
    ex.handler.onError(err);
  }

  /** `ex`'s handler aborts it (nothing when `ex` is no longer this connection's exchange). */
  abortExchange(ex: Exchange, reason: Error): void {
    if (this.ex !== ex) return;
    if (this.written || this.closed) {
      const replace = !this.closed;
      this.fail(reason);
      // The node may still be writing the answer, so the connection is lost with it; the load
      // that opened it has not gone (a client stopping a stream is routine). One opens in its
      // place, so the next requests find the pool as warm as before (see replaceAborted).
      if (replace) this.client.replaceAborted();
      return;
    }
    // Aborted inside onConnect, before a byte was written: the connection is still clean.
    this.ex = null;
    ex.conn = null;
    this.state = St.idle;
    this.client.finished();
    ex.handler.onError(reason);
  }

  /** `ex`'s handler resumes its body (nothing when `ex` is no longer this connection's exchange). */
  resumeExchange(ex: Exchange): void {
    if (this.ex !== ex || !this.paused) return;
    this.paused = false;
    if (this.timer !== null) this.timer.refresh();
    if (this.feeding) return;
    const held = this.held;
    this.held = null;
    this.feed(held ?? EMPTY);
    if (this.paused || this.ex !== ex) return;
    if (this.eof) this.onEof();
    else this.resumeSocket();
  }

  private pauseSocket(): void {
    if (this.socketPaused) return;
    this.socketPaused = true;
    this.socket.pause();
  }

  private resumeSocket(): void {
    this.socketPaused = false;
    this.socket.resume();
  }

  /** The node closed its side, or the socket closed. */
  private onEof(): void {
    this.eof = true;
    const ex = this.ex;
    if (ex === null) {
      this.close();
      return;
    }
    // Bytes still held for a paused handler are parsed first (resume comes back here).
    if (this.paused) return;
    if (this.state === St.untilClose) {
      this.complete(ex, false);
      return;
    }
    this.fail(new H1Error(H1ErrorCode.closed, 'upstream node closed the connection before the answer ended'));
  }

  private onSocketError(e: Error): void {
    if (!this.connected) {
      if (this.closed) return;
      this.closed = true;
      if (this.connectTimer !== null) clearTimeout(this.connectTimer);
      this.connectTimer = null;
      this.client.conns.delete(this);
      this.client.connectFailed(e, this.spare);
      return;
    }
    this.eof = true;
    if (this.ex === null) {
      this.close();
      return;
    }
    // The request may have reached the node: a reset, whatever the errno (an EHOSTUNREACH now is
    // not a connect failure, which would be retried as if the node had seen nothing).
    const code = (e as { code?: unknown }).code;
    this.fail(
      new H1Error(
        H1ErrorCode.closed,
        `upstream connection failed (${typeof code === 'string' ? code : e.message})`,
        e,
      ),
    );
  }

  /** Closes the socket (idempotent) and tells the client once. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.connectTimer !== null) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    this.socket.destroy();
    this.client.conns.delete(this);
    if (this.pending !== null) {
      const ex = this.pending;
      this.pending = null;
      this.client.requeue(ex);
      this.client.finished();
    }
    if (this.connected) this.client.gone(this);
    else
      this.client.connectFailed(
        new H1Error(H1ErrorCode.closedClient, 'connection closed before it was up'),
        this.spare,
      );
  }
}

const EMPTY = Buffer.alloc(0);
const CLOSE_TOKEN = /(?:^|,)[ \t]*close[ \t]*(?:,|$)/i;
const KEEP_ALIVE_TOKEN = /(?:^|,)[ \t]*keep-alive[ \t]*(?:,|$)/i;
const KEEP_ALIVE_TIMEOUT = /(?:^|,)[ \t]*timeout[ \t]*=[ \t]*(\d{1,9})/i;

function protocolError(message: string): H1Error {
  return new H1Error(H1ErrorCode.protocol, `invalid answer from the upstream node: ${message}`);
}

/** tchar (RFC 9110 §5.6.2). */
const TOKEN_BYTES = new Uint8Array(256);
for (const ch of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
  TOKEN_BYTES[ch.charCodeAt(0)] = 1;

/** True when `buf[at, at + lower.length)` equals `lower` ignoring ASCII case. */
function equalsLower(buf: Buffer, at: number, lower: string): boolean {
  for (let i = 0; i < lower.length; i++) if ((buf[at + i]! | 0x20) !== lower.charCodeAt(i)) return false;
  return true;
}

/** A Content-Length value: 1–15 digits; -1 when invalid. */
function parseLength(buf: Buffer, s: number, e: number): number {
  if (e <= s || e - s > 15) return -1;
  let n = 0;
  for (let i = s; i < e; i++) {
    const c = buf[i]! - 48;
    if (c < 0 || c > 9) return -1;
    n = n * 10 + c;
  }
  return n;
}

/** The size of a chunk-size line `buf[s, lf]` (`HEX[;ext]CR LF`); -1 when invalid. */
function parseChunkLine(buf: Buffer, s: number, lf: number): number {
  if (lf < 1 || buf[lf - 1] !== CR) return -1;
  const e = lf - 1;
  let n = 0;
  let i = s;
  for (; i < e; i++) {
    const c = buf[i]!;
    let v: number;
    if (c >= 48 && c <= 57) v = c - 48;
    else if (c >= 97 && c <= 102) v = c - 87;
    else if (c >= 65 && c <= 70) v = c - 55;
    else break;
    if (i - s >= 12) return -1;
    n = n * 16 + v;
  }
  if (i === s) return -1;
  // Chunk extensions are ignored (RFC 9112 §7.1.1); bare whitespace before them is tolerated.
  while (i < e && (buf[i] === SP || buf[i] === HTAB)) i++;
  if (i < e && buf[i] !== SEMI) return -1;
  // Extensions: no control bytes but HTAB.
  return hasControlByte(buf, i, e) ? -1 : n;
}

/** True when `buf[s, e)` holds a control byte other than HTAB, or DEL (RFC 9110 §5.5). */
function hasControlByte(buf: Buffer, s: number, e: number): boolean {
  for (let i = s; i < e; i++) {
    const c = buf[i]!;
    if ((c < SP && c !== HTAB) || c === 127) return true;
  }
  return false;
}
