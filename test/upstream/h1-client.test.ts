/**
 * H1Client (proxy/upstream/h1-client.ts), driven directly against raw `node:net` nodes that write
 * exact response bytes, split where a test wants them: keep-alive reuse and the request head,
 * Content-Length, chunked and read-until-close bodies, informational answers, bodiless answers,
 * framing errors, closes and refusals, the connection cap and its queue, backpressure, abort,
 * request validation, idle connections, the per-call timers and close/destroy. Every handler checks
 * that its callbacks come in a valid order; a violation fails the test it happened in.
 */
import { after, afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import {
  H1Client,
  H1ErrorCode,
  type H1ClientOptions,
  type UpstreamHandler,
  type UpstreamRequest,
} from '../../proxy/upstream/h1-client.js';
import { refusedPort } from '../helpers/refused-port.js';

/** How long a test waits for an exchange, a close or a condition before it fails, ms. */
const WAIT_MS = 3000;

// ---------------------------------------------------------------------------------------------
// The node: a raw TCP server that records what each connection received and answers each request
// with the bytes its responder names.

/** One request as the node received it. */
interface NodeRequest {
  method: string;
  path: string;
  /** The head as received, up to and including the empty line. */
  head: string;
  /** Header fields in order, as sent. */
  headers: [string, string][];
  body: Buffer;
  conn: NodeConn;
  /** Position among every request the node received (0 first). */
  index: number;
  /** Resolves once the reply's last piece was written (or the connection closed first). */
  replied: Promise<void>;
}

/** What the node answers: `pieces` written one by one, `gapMs` apart, then `then` (default: keep open). */
interface Reply {
  pieces: (string | Buffer)[];
  gapMs?: number;
  /** Wait before the first piece, ms. */
  delayMs?: number;
  then?: 'end' | 'destroy' | 'reset';
}

type Responder = (req: NodeRequest) => Reply | null;

class NodeConn {
  readonly id: number;
  readonly socket: net.Socket;
  /** Every byte the connection received. */
  received = Buffer.alloc(0);
  readonly requests: NodeRequest[] = [];
  closed = false;
  readonly closedPromise: Promise<void>;
  private pending = Buffer.alloc(0);

  constructor(
    id: number,
    socket: net.Socket,
    onRequest: (conn: NodeConn, req: Omit<NodeRequest, 'replied' | 'index' | 'conn'>) => void,
  ) {
    this.id = id;
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('error', () => {});
    this.closedPromise = new Promise((resolve) =>
      socket.once('close', () => {
        this.closed = true;
        resolve();
      }),
    );
    socket.on('data', (d: Buffer) => {
      this.received = Buffer.concat([this.received, d]);
      this.pending = Buffer.concat([this.pending, d]);
      for (;;) {
        const end = this.pending.indexOf('\r\n\r\n', 0, 'latin1');
        if (end < 0) return;
        const head = this.pending.toString('latin1', 0, end + 4);
        const lines = head.slice(0, -4).split('\r\n');
        const [method = '', path = ''] = (lines[0] ?? '').split(' ');
        const headers: [string, string][] = lines.slice(1).map((l) => {
          const c = l.indexOf(':');
          return [l.slice(0, c), l.slice(c + 1).trim()];
        });
        const cl = headers.find(([n]) => n.toLowerCase() === 'content-length');
        const length = cl === undefined ? 0 : Number(cl[1]);
        if (this.pending.length < end + 4 + length) return;
        const body = Buffer.from(this.pending.subarray(end + 4, end + 4 + length));
        this.pending = this.pending.subarray(end + 4 + length);
        onRequest(this, { method, path, head, headers, body });
      }
    });
  }

  /** Waits until the connection closed (whoever closed it). */
  async waitClosed(what = `node connection ${this.id} to close`): Promise<void> {
    await within(this.closedPromise, WAIT_MS, what);
  }
}

class RawNode {
  readonly conns: NodeConn[] = [];
  readonly requests: NodeRequest[] = [];
  /** Connections open now, and the most ever open at once. */
  open = 0;
  maxOpen = 0;
  private readonly server: net.Server;
  private readonly responder: Responder;

  private constructor(server: net.Server, responder: Responder) {
    this.server = server;
    this.responder = responder;
  }

  static async start(responder: Responder): Promise<RawNode> {
    const server = net.createServer();
    const node = new RawNode(server, responder);
    server.on('connection', (s) => node.accept(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    nodes.push(node);
    return node;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The paths of the requests received, in order. */
  get paths(): string[] {
    return this.requests.map((r) => r.path);
  }

  private accept(socket: net.Socket): void {
    const conn = new NodeConn(this.conns.length, socket, (c, parsed) => this.onRequest(c, parsed));
    this.conns.push(conn);
    this.open++;
    this.maxOpen = Math.max(this.maxOpen, this.open);
    void conn.closedPromise.then(() => this.open--);
  }

  private onRequest(conn: NodeConn, parsed: Omit<NodeRequest, 'replied' | 'index' | 'conn'>): void {
    let done!: () => void;
    const req: NodeRequest = {
      ...parsed,
      conn,
      index: this.requests.length,
      replied: new Promise<void>((resolve) => (done = resolve)),
    };
    this.requests.push(req);
    conn.requests.push(req);
    const reply = this.responder(req);
    if (reply === null) return;
    void write(conn.socket, reply).then(done, done);
  }

  /** Refuses new connections from now on; those open stay. */
  stopListening(): void {
    this.server.close();
  }

  async close(): Promise<void> {
    for (const c of this.conns) c.socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

async function write(socket: net.Socket, reply: Reply): Promise<void> {
  if (reply.delayMs !== undefined) await delay(reply.delayMs);
  for (let i = 0; i < reply.pieces.length; i++) {
    if (i > 0 && reply.gapMs !== undefined) await delay(reply.gapMs);
    if (socket.destroyed) return;
    const p = reply.pieces[i]!;
    socket.write(typeof p === 'string' ? Buffer.from(p, 'latin1') : p);
  }
  if (socket.destroyed) return;
  if (reply.then === 'end') socket.end();
  else if (reply.then === 'destroy') socket.destroy();
  else if (reply.then === 'reset') socket.resetAndDestroy();
}

/** A complete 200 answer with a Content-Length body. */
function ok(body: string, extra = ''): string {
  return `HTTP/1.1 200 OK\r\nContent-Length: ${Buffer.byteLength(body, 'latin1')}\r\n${extra}\r\n${body}`;
}

/** Answers every request with `200` and a body naming it (`GET /path`). */
const echo: Responder = (req) => ({ pieces: [ok(`${req.method} ${req.path}`)] });

/** Answers the first request with `first`, every later one as `echo`. */
function firstThen(first: Reply | null): Responder {
  return (req) => (req.index === 0 ? first : echo(req));
}

// ---------------------------------------------------------------------------------------------
// The handler: records every callback and checks the order of the sequence.

/** Callback-order violations not yet reported (checked after every test). */
const violations: string[] = [];
const nodes: RawNode[] = [];
const clients: H1Client[] = [];

interface Hooks {
  onConnect?(r: Recorder): void;
  /** The value onHeaders returns (default true). */
  onHeaders?(r: Recorder): boolean;
  /** The value onData returns (default true). */
  onData?(r: Recorder, chunk: Buffer): boolean;
  onComplete?(r: Recorder): void;
}

class Recorder implements UpstreamHandler {
  readonly name: string;
  readonly events: string[] = [];
  connects = 0;
  status = 0;
  statusText = '';
  headers: [string, string][] = [];
  readonly chunks: Buffer[] = [];
  error: NodeJS.ErrnoException | null = null;
  completed = false;
  abort: ((reason: Error) => void) | null = null;
  private resumeFn: (() => void) | null = null;
  /** The handler returned false and has not resumed since. */
  paused = false;
  private readonly hooks: Hooks;
  private readonly done: Promise<void>;
  private finish!: () => void;

  constructor(name: string, hooks: Hooks = {}) {
    this.name = name;
    this.hooks = hooks;
    this.done = new Promise((resolve) => (this.finish = resolve));
  }

  get ended(): boolean {
    return this.completed || this.error !== null;
  }

  get body(): string {
    return Buffer.concat(this.chunks).toString('latin1');
  }

  /** The error's `code` (H1ErrorCode or errno), or undefined. */
  get code(): string | undefined {
    return this.error?.code;
  }

  resume(): void {
    assert.ok(this.resumeFn !== null, `${this.name}: resume before onHeaders`);
    this.paused = false;
    this.resumeFn();
  }

  /** Waits until onComplete or onError. */
  async settled(ms = WAIT_MS): Promise<this> {
    await within(this.done, ms, () => `${this.name} to end (events so far: ${this.events.join(', ')})`);
    return this;
  }

  private bad(what: string): void {
    violations.push(`${this.name}: ${what} (events: ${this.events.join(', ')})`);
  }

  onConnect(abort: (reason: Error) => void): void {
    this.events.push('connect');
    if (this.ended) this.bad('onConnect after the end');
    if (this.connects++ > 0) this.bad('onConnect twice');
    if (this.status !== 0) this.bad('onConnect after onHeaders');
    this.abort = abort;
    this.hooks.onConnect?.(this);
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    this.events.push(`headers ${status}`);
    if (this.ended) this.bad('onHeaders after the end');
    if (this.connects === 0) this.bad('onHeaders before onConnect');
    if (this.status !== 0) this.bad('onHeaders twice');
    if (status < 200) this.bad(`onHeaders with informational status ${status}`);
    this.status = status;
    this.statusText = statusText;
    this.headers = [];
    for (let i = 0; i + 1 < rawHeaders.length; i += 2)
      this.headers.push([rawHeaders[i]!.toString('latin1'), rawHeaders[i + 1]!.toString('latin1')]);
    this.resumeFn = resume;
    const go = this.hooks.onHeaders ? this.hooks.onHeaders(this) : true;
    if (!go) this.paused = true;
    return go;
  }

  onData(chunk: Buffer): boolean {
    this.events.push(`data ${chunk.length}`);
    if (this.ended) this.bad('onData after the end');
    if (this.status === 0) this.bad('onData before onHeaders');
    if (this.paused) this.bad('onData while paused');
    this.chunks.push(Buffer.from(chunk));
    const go = this.hooks.onData ? this.hooks.onData(this, chunk) : true;
    if (!go) this.paused = true;
    return go;
  }

  onComplete(trailers: string[] | null): void {
    this.events.push('complete');
    if (this.ended) this.bad('onComplete after the end');
    if (this.status === 0) this.bad('onComplete without onHeaders');
    if (this.paused) this.bad('onComplete while paused');
    if (trailers !== null && !Array.isArray(trailers)) this.bad('onComplete with bad trailers');
    this.completed = true;
    this.finish();
    this.hooks.onComplete?.(this);
  }

  onError(err: Error): void {
    this.events.push(`error ${(err as NodeJS.ErrnoException).code ?? err.message}`);
    if (this.ended) this.bad('onError after the end');
    this.error = err;
    this.finish();
  }
}

function request(over: Partial<UpstreamRequest> = {}): UpstreamRequest {
  return { method: 'GET', path: '/', headers: [], body: null, ttfbMs: 0, idleMs: 0, ...over };
}

function newClient(origin: string, options: Partial<H1ClientOptions> = {}): H1Client {
  const c = new H1Client(origin, { connections: 0, connectTimeoutMs: 2000, ...options });
  clients.push(c);
  return c;
}

let seq = 0;

/** Dispatches one exchange with a fresh recording handler. */
function call(client: H1Client, over: Partial<UpstreamRequest> = {}, hooks: Hooks = {}): Recorder {
  const r = new Recorder(`${over.method ?? 'GET'} ${over.path ?? '/'} #${++seq}`, hooks);
  client.dispatch(request(over), r);
  return r;
}

/** One exchange to its end; fails the test when it errs. */
async function fetchOk(client: H1Client, over: Partial<UpstreamRequest> = {}): Promise<Recorder> {
  const r = await call(client, over).settled();
  assert.equal(r.error, null, `${r.name} failed: ${r.error?.message ?? ''}`);
  return r;
}

/** Resolves with `p`, or rejects after `ms` naming what did not happen (`what` is read then). */
/** A node that never answers, a client, and one request of it written and waiting at the node. */
async function streamAtNode(
  options: Partial<H1ClientOptions> = {},
): Promise<{ node: RawNode; client: H1Client; r: Recorder }> {
  const node = await RawNode.start(firstThen(null));
  const client = newClient(node.origin, options);
  const r = call(client, { path: '/stream' });
  await waitFor(() => node.requests.length === 1, 'the request at the node');
  return { node, client, r };
}

async function within<T>(p: Promise<T>, ms: number, what: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const text = typeof what === 'string' ? what : what();
      reject(new Error(`timed out after ${ms} ms waiting for ${text}`));
    }, ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function waitFor(check: () => boolean, what: string, ms = WAIT_MS): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await delay(5);
  }
}

/** Waits until the node received its `index`th request and wrote the whole reply to it. */
async function replied(node: RawNode, index = 0): Promise<void> {
  await waitFor(() => node.requests.length > index, `request ${index} at the node`);
  await within(node.requests[index]!.replied, WAIT_MS, `the node to write its reply to request ${index}`);
}

/** Every byte of every request the node received on `conn`, as latin1. */
function receivedOn(conn: NodeConn): string {
  return conn.received.toString('latin1');
}

// ---------------------------------------------------------------------------------------------

describe('H1Client', { timeout: 60_000 }, () => {
  // Destroying a client may still call handlers (onError of a running exchange): the order is
  // checked after it, so a wrong call it causes counts against the test that left it running.
  afterEach(async () => {
    try {
      for (const c of clients.splice(0)) await c.destroy();
      for (const n of nodes.splice(0)) await n.close();
    } finally {
      assert.deepEqual(violations.splice(0), [], 'handler callbacks out of order');
    }
  });

  after(async () => {
    for (const c of clients.splice(0)) await c.destroy();
    for (const n of nodes.splice(0)) await n.close();
    assert.deepEqual(violations.splice(0), [], 'handler callbacks out of order after the last test');
  });

  describe('keep-alive and the request head', () => {
    it('sends sequential requests on one connection, each head in order with host, connection and the caller headers', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      const own = `host: 127.0.0.1:${node.port}\r\nconnection: keep-alive\r\n`;

      const r1 = await fetchOk(client, {
        path: '/v1/models?x=1&y=%20',
        headers: ['x-one', '1', 'accept', 'application/json', 'X-Two', 'b  c'],
      });
      assert.equal(r1.status, 200);
      assert.equal(r1.body, 'GET /v1/models?x=1&y=%20');
      const r2 = await fetchOk(client, {
        method: 'POST',
        path: '/v1/chat/completions',
        headers: ['content-type', 'application/json'],
        body: Buffer.from('{"a":1}'),
      });
      assert.equal(r2.body, 'POST /v1/chat/completions');
      await fetchOk(client, { method: 'POST', path: '/empty' });
      await fetchOk(client, { method: 'PUT', path: '/empty-buffer', body: Buffer.alloc(0) });
      await fetchOk(client, { method: 'DELETE', path: '/gone' });

      assert.equal(node.conns.length, 1, 'one connection carried every request');
      assert.deepEqual(
        node.requests.map((r) => r.head),
        [
          `GET /v1/models?x=1&y=%20 HTTP/1.1\r\n${own}x-one: 1\r\naccept: application/json\r\nX-Two: b  c\r\n\r\n`,
          `POST /v1/chat/completions HTTP/1.1\r\n${own}content-type: application/json\r\ncontent-length: 7\r\n\r\n`,
          `POST /empty HTTP/1.1\r\n${own}content-length: 0\r\n\r\n`,
          `PUT /empty-buffer HTTP/1.1\r\n${own}content-length: 0\r\n\r\n`,
          `DELETE /gone HTTP/1.1\r\n${own}\r\n`,
        ],
      );
      assert.equal(node.requests[1]!.body.toString(), '{"a":1}');
      assert.equal(client.connections, 1);
    });

    it('sends a body with GET as Content-Length bytes, and binary bodies of every size byte for byte', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7) % 256));
      const sizes = [1, 2, 16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 70_000];
      await fetchOk(client, { method: 'GET', path: '/q', body: bytes.subarray(0, 5) });
      for (const n of sizes)
        await fetchOk(client, { method: 'POST', path: `/bin/${n}`, body: bytes.subarray(0, n) });
      assert.equal(node.conns.length, 1);
      assert.match(node.requests[0]!.head, /^GET \/q HTTP\/1\.1\r\n.*\r\ncontent-length: 5\r\n\r\n$/s);
      assert.ok(node.requests[0]!.body.equals(bytes.subarray(0, 5)));
      for (const [i, n] of sizes.entries()) {
        const req = node.requests[i + 1]!;
        assert.match(req.head, new RegExp(`\\r\\ncontent-length: ${n}\\r\\n\\r\\n$`));
        assert.ok(req.body.equals(bytes.subarray(0, n)), `the ${n}-byte body arrived unchanged`);
      }
      assert.equal(
        receivedOn(node.conns[0]!).length,
        node.requests.reduce((t, r) => t + r.head.length + r.body.length, 0),
      );
    });

    it('does not write the caller copies of host, connection, content-length, transfer-encoding or keep-alive', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, {
        method: 'POST',
        path: '/own',
        body: Buffer.from('abc'),
        headers: [
          'host',
          'evil.example',
          'content-length',
          '99',
          'transfer-encoding',
          'chunked',
          'connection',
          'close',
          'keep-alive',
          'timeout=1',
          'x-kept',
          'yes',
        ],
      });
      assert.equal(
        node.requests[0]!.head,
        `POST /own HTTP/1.1\r\nhost: 127.0.0.1:${node.port}\r\nconnection: keep-alive\r\nx-kept: yes\r\ncontent-length: 3\r\n\r\n`,
      );
    });
  });

  describe('the client', () => {
    it('serves http: origins only', () => {
      assert.throws(
        () => new H1Client('https://127.0.0.1:1', { connections: 1, connectTimeoutMs: 100 }),
        /http: origins only/,
      );
    });

    it('accepts a status line without a reason phrase', async () => {
      const node = await RawNode.start(() => ({ pieces: ['HTTP/1.1 201\r\nContent-Length: 1\r\n\r\nx'] }));
      const client = newClient(node.origin);
      const r = await fetchOk(client, { method: 'POST', path: '/made' });
      assert.equal(r.status, 201);
      assert.equal(r.statusText, '');
      assert.equal(r.body, 'x');
    });

    it('reuses the connection that just finished for a request dispatched inside onComplete', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      const later: Recorder[] = [];
      await call(
        client,
        { path: '/first' },
        { onComplete: () => later.push(call(client, { path: '/from-callback' })) },
      ).settled();
      assert.equal(later.length, 1);
      const r2 = await later[0]!.settled();
      assert.equal(r2.body, 'GET /from-callback');
      assert.equal(node.conns.length, 1, 'a second connection was opened though the first one was free');
    });
  });

  describe('bodies split across reads', () => {
    it('a chunk the handler keeps as given stays as it was while later reads arrive, on this connection and others', async () => {
      // Every connection reads into one shared buffer: what a handler is given must be its own.
      // The head, then each body piece in a read of its own (the later ones land where the earlier
      // ones did), with a different body per request.
      const node = await RawNode.start((req) => {
        const a = req.path === '/0' ? 'A' : 'B';
        return {
          pieces: [
            'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n',
            a.repeat(5),
            a.toLowerCase().repeat(5),
            a.repeat(5),
          ],
          gapMs: 20,
        };
      });
      const client = newClient(node.origin);
      const kept: Buffer[][] = [[], []];
      const calls = [0, 1].map((k) =>
        call(
          client,
          { path: `/${k}` },
          {
            onData: (_rec, chunk) => {
              kept[k]!.push(chunk);
              return true;
            },
          },
        ),
      );
      for (const c of calls) await c.settled();
      assert.equal(node.conns.length, 2, 'two connections read at once');
      assert.equal(Buffer.concat(kept[0]!).toString('latin1'), 'AAAAAaaaaaAAAAA');
      assert.equal(Buffer.concat(kept[1]!).toString('latin1'), 'BBBBBbbbbbBBBBB');
    });

    const sizedPieces = [
      'HT',
      'TP/1.1 2',
      '00 O',
      'K\r\nContent-Length: 11\r\nX-A: b\r',
      '\n\r',
      '\n',
      'hel',
      'lo wo',
      'rld',
    ];
    const chunkedPieces = [
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r',
      '\n4;name="va',
      'lue"\r\nwiki\r',
      '\n5\r',
      '\npedia\r\nE\r\n in\r\n\r\nchunks.\r',
      '\n0\r\nExpires: never\r\n',
      'X-Sum: 1\r\n\r',
      '\n',
    ];
    const chunkedBody = 'wikipedia in\r\n\r\nchunks.';

    const splits: { name: string; pieces: (all: string[]) => string[] }[] = [
      {
        name: 'in small pieces with gaps (splits in the status line, head terminator, chunk line and chunk CRLF)',
        pieces: (all) => all,
      },
      { name: 'in one packet', pieces: (all) => [all.join('')] },
      { name: 'one byte at a time', pieces: (all) => [...all.join('')] },
    ];

    for (const s of splits) {
      it(`delivers a Content-Length body sent ${s.name}, completes once and reuses the connection`, async () => {
        const node = await RawNode.start(firstThen({ pieces: s.pieces(sizedPieces), gapMs: 2 }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { path: '/sized' });
        assert.equal(r.status, 200);
        assert.equal(r.statusText, '', 'the reason phrase is checked, not decoded');
        assert.deepEqual(r.headers, [
          ['Content-Length', '11'],
          ['X-A', 'b'],
        ]);
        assert.equal(r.body, 'hello world');
        assert.equal(r.events.filter((e) => e === 'complete').length, 1);
        const r2 = await fetchOk(client, { path: '/next' });
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 1, 'the connection was reused');
      });

      it(`decodes a chunked body with extensions and trailers sent ${s.name}, completes once and reuses the connection`, async () => {
        const node = await RawNode.start(firstThen({ pieces: s.pieces(chunkedPieces), gapMs: 2 }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { path: '/chunked' });
        assert.equal(r.status, 200);
        assert.deepEqual(r.headers, [['Transfer-Encoding', 'chunked']]);
        assert.equal(r.body, chunkedBody);
        assert.equal(r.events.filter((e) => e === 'complete').length, 1);
        const r2 = await fetchOk(client, { path: '/next' });
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 1, 'the connection was reused');
      });
    }

    it('delivers a 1 MiB binary Content-Length body and a binary chunked body byte for byte', async () => {
      const big = Buffer.from(Array.from({ length: 1 << 20 }, (_, i) => (i * 31 + (i >> 8)) % 256));
      const chunked = Buffer.concat([
        Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'),
        Buffer.from('10000\r\n'),
        big.subarray(0, 0x10000),
        Buffer.from('\r\n1\r\n'),
        big.subarray(0x10000, 0x10001),
        Buffer.from('\r\n0\r\n\r\n'),
      ]);
      const node = await RawNode.start((req) =>
        req.path === '/sized'
          ? { pieces: [`HTTP/1.1 200 OK\r\nContent-Length: ${big.length}\r\n\r\n`, big] }
          : { pieces: [chunked] },
      );
      const client = newClient(node.origin);
      const r1 = await fetchOk(client, { path: '/sized' });
      assert.ok(Buffer.concat(r1.chunks).equals(big), 'the sized body arrived unchanged');
      const r2 = await fetchOk(client, { path: '/chunked' });
      assert.ok(
        Buffer.concat(r2.chunks).equals(big.subarray(0, 0x10001)),
        'the chunked body arrived unchanged',
      );
      assert.equal(node.conns.length, 1);
    });
  });

  describe('answers that end the connection', () => {
    it('reads a body with neither Content-Length nor Transfer-Encoding until the node closes, and opens a new connection next', async () => {
      const node = await RawNode.start(
        firstThen({
          pieces: ['HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nabc', 'def', 'ghi'],
          gapMs: 5,
          then: 'end',
        }),
      );
      const client = newClient(node.origin);
      const r = await call(client, { path: '/until-close' }).settled();
      assert.equal(r.error, null);
      assert.equal(r.body, 'abcdefghi');
      await node.conns[0]!.waitClosed();
      const r2 = await fetchOk(client, { path: '/next' });
      assert.equal(r2.body, 'GET /next');
      assert.equal(node.conns.length, 2, 'the next request opened a new connection');
    });

    const closing: { name: string; answer: string }[] = [
      {
        name: 'an HTTP/1.0 answer with Content-Length',
        answer: 'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi',
      },
      {
        name: 'a Connection: close answer',
        answer: 'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi',
      },
      {
        name: 'a Connection: close among other tokens',
        answer: 'HTTP/1.1 200 OK\r\nConnection: Upgrade, CLOSE\r\nContent-Length: 2\r\n\r\nhi',
      },
      {
        name: 'a chunked Connection: close answer',
        answer:
          'HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n',
      },
    ];
    for (const c of closing) {
      it(`closes the connection after ${c.name} (the node leaves it open) and opens a new one next`, async () => {
        const node = await RawNode.start(firstThen({ pieces: [c.answer] }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { path: '/first' });
        assert.equal(r.body, 'hi');
        await node.conns[0]!.waitClosed('the client to close the connection');
        await fetchOk(client, { path: '/next' });
        assert.equal(node.conns.length, 2);
      });
    }

    it('keeps an HTTP/1.0 connection that answers Connection: keep-alive with Content-Length', async () => {
      const node = await RawNode.start(() => ({
        pieces: ['HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi'],
      }));
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/a' });
      await fetchOk(client, { path: '/b' });
      assert.equal(node.conns.length, 1);
    });
  });

  describe('informational answers', () => {
    const early =
      'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n';
    for (const [name, pieces] of [
      ['in one packet', [`${early}${ok('final')}`]],
      [
        'in pieces',
        [
          'HTTP/1.1 100 Contin',
          'ue\r\n\r',
          '\nHTTP/1.1 103 Early Hints\r\nLink: <',
          '/a>\r\n\r\n',
          ok('final'),
        ],
      ],
    ] as const) {
      it(`skips 100 and 103 sent ${name}: onHeaders once with the final answer, whose body follows`, async () => {
        const node = await RawNode.start(firstThen({ pieces: [...pieces], gapMs: 2 }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { path: '/hints' });
        assert.deepEqual(r.events, ['connect', 'headers 200', 'data 5', 'complete']);
        assert.deepEqual(r.headers, [['Content-Length', '5']]);
        assert.equal(r.body, 'final');
        await fetchOk(client, { path: '/next' });
        assert.equal(node.conns.length, 1);
      });
    }

    it('fails a 101 Switching Protocols answer with a protocol error and drops the connection', async () => {
      const node = await RawNode.start(
        firstThen({
          pieces: ['HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'],
        }),
      );
      const client = newClient(node.origin);
      const r = await call(client, { path: '/ws' }).settled();
      assert.equal(r.code, H1ErrorCode.protocol);
      assert.equal(r.status, 0, 'no onHeaders');
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
      assert.equal(node.conns.length, 2);
    });
  });

  describe('answers without a body', () => {
    const cases: { name: string; method: string; answer: string; status: number }[] = [
      {
        name: 'a HEAD answer with Content-Length',
        method: 'HEAD',
        answer: 'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n',
        status: 200,
      },
      {
        name: 'a HEAD answer with Transfer-Encoding: chunked',
        method: 'HEAD',
        answer: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n',
        status: 200,
      },
      { name: 'a 204 answer', method: 'DELETE', answer: 'HTTP/1.1 204 No Content\r\n\r\n', status: 204 },
      {
        name: 'a 204 answer to a POST',
        method: 'POST',
        answer: 'HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n',
        status: 204,
      },
      {
        name: 'a 304 answer with Content-Length',
        method: 'GET',
        answer: 'HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\nETag: "x"\r\n\r\n',
        status: 304,
      },
    ];
    for (const c of cases) {
      it(`reads no body after ${c.name} and reuses the connection for the next request`, async () => {
        const node = await RawNode.start(firstThen({ pieces: [c.answer] }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { method: c.method, path: '/nobody' });
        assert.equal(r.status, c.status);
        assert.equal(r.chunks.length, 0, 'no onData');
        const r2 = await fetchOk(client, { path: '/next' });
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 1, 'the connection was reused');
      });
    }
  });

  describe('protocol errors', () => {
    const H = 'HTTP/1.1 200 OK\r\n';
    const cases: { name: string; answer: string; more?: string; maxHeadBytes?: number; split?: number }[] = [
      {
        name: 'Content-Length with Transfer-Encoding',
        answer: `${H}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a control byte in a chunk extension',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5;a\rb\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk size line over 4 KiB in one packet',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5;${'e'.repeat(5000)}\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a trailer section over 4 KiB in one packet',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: ${'t'.repeat(5000)}\r\n\r\n`,
      },
      {
        name: 'Transfer-Encoding before Content-Length',
        answer: `${H}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a repeated Content-Length (same value)',
        answer: `${H}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello`,
      },
      {
        name: 'a repeated Content-Length (other value)',
        answer: `${H}Content-Length: 5\r\ncontent-length: 6\r\n\r\nhello!`,
      },
      { name: 'a Content-Length list', answer: `${H}Content-Length: 5, 5\r\n\r\nhello` },
      { name: 'a Content-Length with a plus sign', answer: `${H}Content-Length: +5\r\n\r\nhello` },
      { name: 'a negative Content-Length', answer: `${H}Content-Length: -5\r\n\r\nhello` },
      { name: 'an empty Content-Length', answer: `${H}Content-Length:\r\n\r\n` },
      { name: 'a hexadecimal Content-Length', answer: `${H}Content-Length: 0x5\r\n\r\nhello` },
      {
        name: 'Transfer-Encoding: gzip, chunked',
        answer: `${H}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
      },
      {
        name: 'Transfer-Encoding: chunked, chunked',
        answer: `${H}Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n`,
      },
      {
        name: 'Transfer-Encoding repeated as two fields',
        answer: `${H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      },
      { name: 'Transfer-Encoding: identity', answer: `${H}Transfer-Encoding: identity\r\n\r\nhello` },
      {
        name: 'Transfer-Encoding: chunked with a parameter',
        answer: `${H}Transfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk size that is not hexadecimal',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a negative chunk size',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk size of 13 hex digits',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n1000000000000\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'an empty chunk-size line',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk size followed by junk',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk-size line ended by a bare LF',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n`,
      },
      {
        name: 'a chunk-size line split and ended by a bare LF',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5`,
        more: '\nhello\r\n0\r\n\r\n',
      },
      {
        name: 'chunk data not followed by CRLF',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXY0\r\n\r\n`,
      },
      {
        name: 'chunk data followed by a bare LF',
        answer: `${H}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n`,
      },
      { name: 'obs-fold in a header', answer: `${H}X-A: a\r\n  folded\r\nContent-Length: 0\r\n\r\n` },
      { name: 'obs-fold with a tab', answer: `${H}X-A: a\r\n\tfolded\r\nContent-Length: 0\r\n\r\n` },
      { name: 'a space before the colon', answer: `${H}Content-Length : 5\r\n\r\nhello` },
      { name: 'a header line without a colon', answer: `${H}Content-Length 5\r\n\r\nhello` },
      { name: 'an empty header name', answer: `${H}: x\r\nContent-Length: 0\r\n\r\n` },
      { name: 'a NUL in a header value', answer: `${H}X-A: a\0b\r\nContent-Length: 0\r\n\r\n` },
      {
        name: 'a control byte (0x01) in a header value',
        answer: `${H}X-A: a\x01b\r\nContent-Length: 0\r\n\r\n`,
      },
      { name: 'a DEL in a header value', answer: `${H}X-A: a\x7fb\r\nContent-Length: 0\r\n\r\n` },
      { name: 'a bare CR inside a header value', answer: `${H}X-A: a\rb\r\nContent-Length: 0\r\n\r\n` },
      { name: 'a bare LF ending one header line', answer: `${H}X-A: a\nContent-Length: 0\r\n\r\n` },
      { name: 'a bare LF ending the status line', answer: 'HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n' },
      {
        name: 'a control byte in the reason phrase',
        answer: 'HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n',
      },
      { name: 'status 600', answer: 'HTTP/1.1 600 Weird\r\nContent-Length: 0\r\n\r\n' },
      { name: 'status 099', answer: 'HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n' },
      { name: 'a two-digit status', answer: 'HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n' },
      { name: 'a status glued to its reason', answer: 'HTTP/1.1 200OK\r\nContent-Length: 0\r\n\r\n' },
      { name: 'a garbage status line', answer: 'HELLO WORLD\r\nContent-Length: 0\r\n\r\n' },
      { name: 'an HTTP/2.0 status line', answer: 'HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n' },
      { name: 'a lower-case protocol name', answer: 'http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n' },
      {
        name: 'a head over maxHeadBytes in one packet',
        answer: `${H}X-Big: ${'a'.repeat(600)}\r\nContent-Length: 0\r\n\r\n`,
        maxHeadBytes: 512,
      },
      {
        name: 'a head over maxHeadBytes arriving in pieces without its end',
        answer: `${H}X-Big: ${'a'.repeat(2000)}`,
        maxHeadBytes: 512,
        split: 100,
      },
      {
        name: 'a head one byte over maxHeadBytes',
        answer: `${H}X-Big: ${'a'.repeat(512 - H.length - 'X-Big: \r\n\r\n'.length + 1)}\r\n\r\n`,
        maxHeadBytes: 512,
      },
    ];
    for (const c of cases) {
      it(`fails ${c.name} with ${H1ErrorCode.protocol} and does not reuse the connection`, async () => {
        const pieces: string[] = [];
        if (c.split === undefined) pieces.push(c.answer);
        else for (let i = 0; i < c.answer.length; i += c.split) pieces.push(c.answer.slice(i, i + c.split));
        if (c.more !== undefined) pieces.push(c.more);
        const node = await RawNode.start(firstThen({ pieces, gapMs: 2 }));
        const client = newClient(
          node.origin,
          c.maxHeadBytes === undefined ? {} : { maxHeadBytes: c.maxHeadBytes },
        );
        const r = await call(client, { path: '/bad' }).settled();
        assert.equal(r.code, H1ErrorCode.protocol, `error: ${r.error?.message ?? 'none'}`);
        assert.match(r.error!.message, /invalid answer from the upstream node/);
        await node.conns[0]!.waitClosed('the client to drop the connection');
        const r2 = await fetchOk(client, { path: '/next' });
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 2, 'the next request came on a new connection');
      });
    }

    it('accepts a head of exactly maxHeadBytes', async () => {
      const pad = 512 - H.length - 'X-Big: \r\nContent-Length: 0\r\n\r\n'.length;
      const answer = `${H}X-Big: ${'a'.repeat(pad)}\r\nContent-Length: 0\r\n\r\n`;
      assert.equal(answer.length, 512);
      const node = await RawNode.start(() => ({ pieces: [answer] }));
      const client = newClient(node.origin, { maxHeadBytes: 512 });
      const r = await fetchOk(client, { path: '/exact' });
      assert.equal(r.status, 200);
    });

    it(`fails an answer whose head uses bare LF line endings throughout with ${H1ErrorCode.protocol} while the node keeps the connection open`, async () => {
      const node = await RawNode.start(firstThen({ pieces: ['HTTP/1.1 200 OK\nContent-Length: 2\n\nhi'] }));
      const client = newClient(node.origin);
      const r = await call(client, { path: '/lf' }).settled(1000);
      assert.equal(r.code, H1ErrorCode.protocol, `error: ${r.error?.message ?? 'none'}`);
    });
  });

  describe('closes, resets and refusals', () => {
    const cases: { name: string; reply: Reply; code: string; status: number; body: string }[] = [
      {
        name: 'closes before the head',
        reply: { pieces: [], then: 'end' },
        code: H1ErrorCode.closed,
        status: 0,
        body: '',
      },
      {
        name: 'closes inside the head',
        reply: { pieces: ['HTTP/1.1 200 OK\r\nContent-Len'], then: 'end' },
        code: H1ErrorCode.closed,
        status: 0,
        body: '',
      },
      {
        name: 'closes inside a Content-Length body',
        reply: { pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello'], then: 'end' },
        code: H1ErrorCode.closed,
        status: 200,
        body: 'hello',
      },
      {
        name: 'closes between chunks',
        reply: {
          pieces: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n'],
          then: 'end',
        },
        code: H1ErrorCode.closed,
        status: 200,
        body: 'hello',
      },
      {
        name: 'closes before the last empty line of a chunked body',
        reply: {
          pieces: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n'],
          then: 'end',
        },
        code: H1ErrorCode.closed,
        status: 200,
        body: 'hello',
      },
      {
        name: 'resets the connection before the head',
        reply: { pieces: [], then: 'reset' },
        // A reset after the request was written is reported as a closed connection whatever the errno.
        code: H1ErrorCode.closed,
        status: 0,
        body: '',
      },
    ];
    for (const c of cases) {
      it(`fails the exchange with ${c.code} when the node ${c.name}, and the next request works on a new connection`, async () => {
        const node = await RawNode.start(firstThen(c.reply));
        const client = newClient(node.origin);
        const r = await call(client, { path: '/cut' }).settled();
        assert.equal(r.code, c.code, `error: ${r.error?.message ?? 'none'}`);
        assert.equal(r.status, c.status);
        assert.equal(r.body, c.body);
        const r2 = await fetchOk(client, { path: '/next' });
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 2);
      });
    }

    it('fails with ECONNREFUSED when nothing listens, without onConnect, and fails the next request the same way', async () => {
      const client = newClient(`http://127.0.0.1:${await refusedPort()}`, { connections: 1 });
      const r1 = call(client, { path: '/a' });
      const r2 = call(client, { path: '/b' });
      await r1.settled();
      await r2.settled();
      assert.equal(r1.code, 'ECONNREFUSED');
      assert.equal(r2.code, 'ECONNREFUSED');
      assert.equal(r1.connects + r2.connects, 0);
      assert.equal(client.connections, 0);
      const r3 = await call(client, { path: '/c' }).settled();
      assert.equal(r3.code, 'ECONNREFUSED');
    });
  });

  describe('the connection cap and the queue', () => {
    it('opens at most one connection per waiting request to a node that refuses them, and fails every waiting request', async () => {
      const port = await refusedPort();
      for (const connections of [0, 2]) {
        const client = newClient(`http://127.0.0.1:${port}`, { connections });
        const rs = Array.from({ length: 40 }, (_, i) => call(client, { path: `/${i}` }));
        await Promise.all(rs.map((r) => r.settled()));
        assert.deepEqual(
          rs.flatMap((r, i) => (r.code === 'ECONNREFUSED' ? [] : [`${i}: ${r.code ?? 'no error'}`])),
          [],
          `connections: ${connections}`,
        );
        // Each failed connect opened others for the requests still waiting: 40 requests made
        // about 800 connects before.
        assert.ok(
          client.opened <= 40,
          `connections: ${connections}: ${client.opened} connects for 40 requests`,
        );
        assert.equal(client.connections, 0);
      }
    });

    it('drains 3000 queued requests given up while they waited without recursing, and serves the live one behind them', async () => {
      const node = await RawNode.start((req) => ({
        pieces: [ok(req.path)],
        delayMs: req.index === 0 ? 30 : 0,
      }));
      const client = newClient(node.origin, { connections: 1 });
      const first = call(client, { path: '/first' });
      const reason = new Error('given up while waiting');
      const dead = Array.from({ length: 3000 }, () =>
        call(client, { path: '/dead' }, { onConnect: (rec) => rec.abort!(reason) }),
      );
      const last = call(client, { path: '/last' });
      await Promise.all([first.settled(), last.settled(10_000), ...dead.map((r) => r.settled(10_000))]);
      assert.equal(first.body, '/first');
      assert.equal(last.body, '/last');
      assert.ok(
        dead.every((r) => r.error === reason),
        'every request given up ended with its reason',
      );
      assert.deepEqual(node.paths, ['/first', '/last']);
      assert.equal(node.conns.length, 1);
    });

    it('with connections: 2 runs 6 concurrent requests on at most 2 connections, all complete, started in dispatch order', async () => {
      const node = await RawNode.start((req) => ({ pieces: [ok(`${req.path} done`)], delayMs: 15 }));
      const client = newClient(node.origin, { connections: 2 });
      const started: string[] = [];
      const rs = Array.from({ length: 6 }, (_, i) =>
        call(client, { path: `/${i}` }, { onConnect: () => started.push(`/${i}`) }),
      );
      assert.ok(client.connections <= 2);
      await Promise.all(rs.map((r) => r.settled()));
      assert.deepEqual(
        rs.map((r) => r.body),
        rs.map((_, i) => `/${i} done`),
      );
      assert.deepEqual(started, ['/0', '/1', '/2', '/3', '/4', '/5']);
      assert.equal(node.conns.length, 2, 'two connections were opened');
      assert.ok(node.maxOpen <= 2, `at most 2 open at the node (saw ${node.maxOpen})`);
      assert.equal(node.requests.length, 6);
    });

    it('runs a backlog of 1500 requests queued on one connection, each once, in dispatch order', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin, { connections: 1 });
      const order: number[] = [];
      const rs = Array.from({ length: 1500 }, (_, i) =>
        call(client, { path: `/${i}` }, { onConnect: () => order.push(i) }),
      );
      await Promise.all(rs.map((r) => r.settled(10_000)));
      assert.deepEqual(
        rs.flatMap((r, i) => (r.error === null && r.body === `GET /${i}` ? [] : [i])),
        [],
        'requests that failed or got another answer',
      );
      assert.deepEqual(
        order,
        Array.from({ length: 1500 }, (_, i) => i),
      );
      assert.deepEqual(
        node.paths,
        Array.from({ length: 1500 }, (_, i) => `/${i}`),
      );
      assert.equal(node.conns.length, 1);
    });

    it('without a cap opens one connection per concurrent request and reuses them afterwards', async () => {
      const node = await RawNode.start((req) => ({ pieces: [ok(req.path)], delayMs: 10 }));
      const client = newClient(node.origin, { connections: 0 });
      const rs = Array.from({ length: 4 }, (_, i) => call(client, { path: `/${i}` }));
      await Promise.all(rs.map((r) => r.settled()));
      assert.equal(node.conns.length, 4);
      await fetchOk(client, { path: '/again' });
      assert.equal(node.conns.length, 4);
      assert.equal(client.connections, 4);
    });

    it('when a queued request waits and the busy connection fails, the queued one runs on a new connection', async () => {
      const node = await RawNode.start(
        firstThen({ pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel'], then: 'destroy' }),
      );
      const client = newClient(node.origin, { connections: 1 });
      const r1 = call(client, { path: '/first' });
      const r2 = call(client, { path: '/second' });
      await r1.settled();
      await r2.settled();
      assert.equal(r1.code, H1ErrorCode.closed);
      assert.equal(r2.error, null);
      assert.equal(r2.body, 'GET /second');
      assert.equal(node.conns.length, 2);
    });
  });

  describe('backpressure', () => {
    it('sends no onData after onData returned false until resume, and everything arrives afterwards', async () => {
      const parts = ['one-', 'two-', 'three-', 'four'];
      const node = await RawNode.start(
        firstThen({ pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n', ...parts], gapMs: 10 }),
      );
      const client = newClient(node.origin);
      const r = call(client, { path: '/slow-reader' }, { onData: () => false });
      await waitFor(() => r.chunks.length === 1, 'the first piece');
      await replied(node);
      // The node wrote everything; a paused handler must still hold just the first piece.
      await delay(50);
      assert.equal(r.body, 'one-');
      while (!r.ended) {
        await waitFor(() => r.paused || r.ended, 'the next piece');
        if (r.paused) r.resume();
      }
      assert.equal(r.error, null);
      assert.equal(r.body, 'one-two-three-four');
      const r2 = await fetchOk(client, { path: '/next' });
      assert.equal(r2.body, 'GET /next');
      assert.equal(node.conns.length, 1);
    });

    it('delivers chunks that arrived in one packet one per resume when the handler pauses after each', async () => {
      const node = await RawNode.start(
        firstThen({
          pieces: [
            'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n3\r\nghi\r\n0\r\n\r\n',
          ],
        }),
      );
      const client = newClient(node.origin);
      const r = call(client, { path: '/chunks' }, { onData: () => false });
      await waitFor(() => r.chunks.length === 1, 'the first chunk');
      await replied(node);
      assert.deepEqual(r.events, ['connect', 'headers 200', 'data 3']);
      r.resume();
      assert.equal(r.body, 'abcdef', 'one more chunk per resume');
      r.resume();
      assert.equal(r.body, 'abcdefghi');
      assert.equal(r.completed, false, 'complete waits for the resume after the last chunk');
      r.resume();
      assert.equal(r.completed, true);
      await fetchOk(client, { path: '/next' });
      assert.equal(node.conns.length, 1);
    });

    for (const [name, answer] of [
      ['Content-Length', ok('whole-body')],
      [
        'chunked',
        'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nwhole\r\n5\r\n-body\r\n0\r\n\r\n',
      ],
    ] as const) {
      it(`holds a ${name} body that came with the head when onHeaders returns false, delivers it on resume and then reuses the connection`, async () => {
        const node = await RawNode.start(firstThen({ pieces: [answer] }));
        const client = newClient(node.origin);
        const r = call(client, { path: '/paused-head' }, { onHeaders: () => false });
        await waitFor(() => r.status === 200, 'the head');
        await replied(node);
        await delay(30);
        assert.deepEqual(r.events, ['connect', 'headers 200'], 'nothing delivered before resume');
        r.resume();
        await r.settled();
        assert.equal(r.error, null);
        assert.equal(r.body, 'whole-body');
        // The connection must be read again: the next answer on it arrives and completes.
        const r2 = await call(client, { path: '/next' }).settled();
        assert.equal(r2.error, null, `next request: ${r2.error?.message ?? ''}`);
        assert.equal(r2.body, 'GET /next');
        assert.equal(node.conns.length, 1, 'the connection was reused');
      });
    }

    it('holds a read-until-close body and the close while paused, then delivers both on resume', async () => {
      const node = await RawNode.start(
        firstThen({ pieces: ['HTTP/1.1 200 OK\r\n\r\nall', ' of it'], gapMs: 5, then: 'end' }),
      );
      const client = newClient(node.origin);
      const r = call(client, { path: '/close-paused' }, { onHeaders: () => false });
      await replied(node);
      await delay(30);
      assert.deepEqual(r.events, ['connect', 'headers 200']);
      r.resume();
      await r.settled();
      assert.equal(r.error, null);
      assert.equal(r.body, 'all of it');
    });

    it('does not time out a body paused by the handler for longer than idleMs', async () => {
      const node = await RawNode.start(firstThen({ pieces: [ok('patient')] }));
      const client = newClient(node.origin);
      const r = call(client, { path: '/paused-idle', idleMs: 40 }, { onHeaders: () => false });
      await waitFor(() => r.status === 200, 'the head');
      await delay(150);
      assert.equal(r.error, null, `error while paused: ${r.error?.message ?? ''}`);
      r.resume();
      await r.settled();
      assert.equal(r.error, null);
      assert.equal(r.body, 'patient');
    });
  });

  describe('abort', () => {
    it('abort mid-body ends the exchange with the reason, nothing follows, the connection closes and the next request uses a new one', async () => {
      const node = await RawNode.start(
        firstThen({
          pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst', 'second', 'third'],
          gapMs: 30,
        }),
      );
      const client = newClient(node.origin);
      const reason = new Error('client went away');
      const r = call(
        client,
        { path: '/abort' },
        {
          onData: (rec) => {
            rec.abort!(reason);
            return true;
          },
        },
      );
      await r.settled();
      assert.equal(r.error, reason);
      assert.deepEqual(r.events, ['connect', 'headers 200', 'data 5', 'error client went away']);
      await node.conns[0]!.waitClosed('the node to see the connection close');
      await replied(node);
      const r2 = await fetchOk(client, { path: '/next' });
      assert.equal(r2.body, 'GET /next');
      assert.equal(node.conns.length, 2);
      assert.deepEqual(
        r.events,
        ['connect', 'headers 200', 'data 5', 'error client went away'],
        'nothing after the error',
      );
    });

    it('a connection lost to an abort after the request was written is replaced at once and parked for the next request', async () => {
      const { node, client, r } = await streamAtNode();
      r.abort!(new Error('client stopped the stream'));
      await node.conns[0]!.waitClosed();
      // No request asked for it: the replacement comes up on its own and waits idle.
      await waitFor(() => node.conns.length === 2, 'a replacement connection at the node');
      await waitFor(() => client.idleConnections === 1, 'the replacement parked idle');
      assert.equal(client.opened, 2);
      const r2 = await fetchOk(client, { path: '/next' });
      assert.equal(r2.body, 'GET /next');
      assert.equal(node.conns.length, 2, 'the next request took the replacement: no third connect');
      assert.equal(node.conns[1]!.requests[0]!.path, '/next');
    });

    it('the replacement stays within the connection cap: a waiting request takes the connection opened for it, and no other opens', async () => {
      const { node, client, r } = await streamAtNode({ connections: 1 });
      const waiting = call(client, { path: '/queued' });
      r.abort!(new Error('client stopped the stream'));
      await waiting.settled();
      assert.equal(waiting.body, 'GET /queued');
      await delay(50);
      assert.equal(node.conns.length, 2);
      assert.equal(client.opened, 2, 'one connection for the queued request, no replacement beside it');
      assert.equal(client.connections, 1);
    });

    it('no replacement opens for an abort while the client is closing', async () => {
      const { node, client, r } = await streamAtNode();
      const closed = client.close();
      r.abort!(new Error('shutting down'));
      await within(closed, WAIT_MS, 'close() to resolve');
      await delay(50);
      assert.equal(node.conns.length, 1);
      assert.equal(client.opened, 1);
    });

    it('a replacement that cannot connect fails no request: one waiting for it gets a connect of its own', async () => {
      const { node, client, r } = await streamAtNode();
      node.stopListening();
      r.abort!(new Error('client stopped the stream'));
      // Queued behind the replacement, which is opening.
      const waiting = call(client, { path: '/next' });
      await waiting.settled();
      assert.equal(waiting.code, 'ECONNREFUSED');
      assert.equal(client.opened, 3, "the first connection, the replacement, and the waiting request's own");
      assert.equal(client.connections, 0);
    });

    it('close() right after such an abort closes the replacement still opening: none is left, and none reaches the node after', async () => {
      const { node, client, r } = await streamAtNode();
      r.abort!(new Error('client stopped the stream'));
      await within(client.close(), WAIT_MS, 'close() to resolve');
      assert.equal(client.connections, 0, 'no connection open or opening after close() resolved');
      const atClose = node.conns.length;
      await delay(100);
      assert.equal(node.conns.length, atClose, 'no connection reached the node after close() resolved');
    });

    it('abort inside onHeaders ends the exchange with the reason and drops the connection', async () => {
      const node = await RawNode.start(firstThen({ pieces: [ok('never read')] }));
      const client = newClient(node.origin);
      const reason = new Error('not wanted');
      const r = call(
        client,
        { path: '/abort-head' },
        {
          onHeaders: (rec) => {
            rec.abort!(reason);
            return true;
          },
        },
      );
      await r.settled();
      assert.equal(r.error, reason);
      assert.deepEqual(r.events, ['connect', 'headers 200', 'error not wanted']);
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
    });

    it('abort while waiting for the head closes the connection the request was written on', async () => {
      const node = await RawNode.start(firstThen(null));
      const client = newClient(node.origin);
      const r = call(client, { path: '/stalled' });
      await waitFor(() => node.requests.length === 1, 'the request at the node');
      const reason = new Error('deadline');
      r.abort!(reason);
      assert.equal(r.error, reason, 'onError comes inside abort');
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
      assert.equal(node.conns.length, 2);
    });

    it('abort inside onConnect on a reused connection sends nothing, errs with the reason and leaves the connection for the next request', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/1' });
      const reason = new Error('cancelled while queued');
      const r = call(client, { path: '/2' }, { onConnect: (rec) => rec.abort!(reason) });
      await r.settled();
      assert.equal(r.error, reason);
      assert.deepEqual(r.events, ['connect', 'error cancelled while queued']);
      await fetchOk(client, { path: '/3' });
      assert.deepEqual(node.paths, ['/1', '/3']);
      assert.equal(node.conns.length, 1);
      assert.doesNotMatch(receivedOn(node.conns[0]!), /\/2/);
    });

    it('abort inside onConnect on a new connection sends nothing and the connection serves the next request', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      const reason = new Error('cancelled');
      const r = call(client, { path: '/never' }, { onConnect: (rec) => rec.abort!(reason) });
      await r.settled();
      assert.equal(r.error, reason);
      await fetchOk(client, { path: '/after' });
      assert.deepEqual(node.paths, ['/after']);
      assert.equal(node.conns.length, 1);
      assert.doesNotMatch(receivedOn(node.conns[0]!), /never/);
    });

    it('an abort kept from a finished exchange does nothing to the next exchange on the same connection', async () => {
      const node = await RawNode.start((req) => ({
        pieces: [ok(req.path)],
        delayMs: req.index === 0 ? 0 : 40,
      }));
      const client = newClient(node.origin);
      const r1 = await fetchOk(client, { path: '/first' });
      const r2 = call(client, { path: '/second' });
      await waitFor(() => node.requests.length === 2, 'the second request at the node');
      r1.abort!(new Error('late abort of the first exchange'));
      await r2.settled();
      assert.equal(r2.error, null, `the second exchange failed: ${r2.error?.message ?? ''}`);
      assert.equal(r2.body, '/second');
    });
  });

  describe('request validation', () => {
    it('never writes a caller Host or framing header beside its own, whatever its case', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, {
        method: 'POST',
        path: '/case',
        headers: ['Host', 'evil.test', 'Transfer-Encoding', 'chunked', 'Content-Length', '99', 'X-Ok', '1'],
        body: Buffer.from('hi'),
      });
      const names = node.requests[0]!.headers.map(([n]) => n.toLowerCase());
      assert.deepEqual(
        names.filter((n) => n === 'host' || n === 'transfer-encoding' || n === 'content-length'),
        ['host', 'content-length'],
      );
      assert.match(node.requests[0]!.head, /\r\nhost: 127\.0\.0\.1:\d+\r\n/);
      assert.match(node.requests[0]!.head, /\r\ncontent-length: 2\r\n/);
      assert.match(node.requests[0]!.head, /\r\nX-Ok: 1\r\n/);
    });

    const cases: { name: string; req: Partial<UpstreamRequest> }[] = [
      { name: 'a header value with CRLF', req: { headers: ['x-a', 'v\r\nx-injected: 1'] } },
      { name: 'a header value with a bare LF', req: { headers: ['x-a', 'v\nx-injected: 1'] } },
      { name: 'a header value with a bare CR', req: { headers: ['x-a', 'v\rw'] } },
      { name: 'a header value with NUL', req: { headers: ['x-a', 'v\0w'] } },
      { name: 'a header value beyond latin1', req: { headers: ['x-a', 'v\u0100'] } },
      { name: 'a header name with a space', req: { headers: ['x a', 'v'] } },
      { name: 'a header name with a colon', req: { headers: ['x-a:', 'v'] } },
      { name: 'an empty header name', req: { headers: ['', 'v'] } },
      { name: 'a method with a space', req: { method: 'GET /evil HTTP/1.1\r\nx:' } },
      { name: 'a method with a tab', req: { method: 'GE\tT' } },
      { name: 'an empty method', req: { method: '' } },
      { name: 'a method with CRLF', req: { method: 'GET\r\n' } },
      { name: 'a path with a space', req: { path: '/a b' } },
      { name: 'a path with a control byte', req: { path: '/a\x01b' } },
      { name: 'a path with CRLF', req: { path: '/a\r\nx-injected: 1' } },
      { name: 'a path with a tab', req: { path: '/a\tb' } },
      { name: 'a path with DEL', req: { path: '/a\x7fb' } },
      { name: 'a path with a latin1 byte above 0x7E', req: { path: '/caf\u00e9' } },
      { name: 'a path beyond latin1', req: { path: '/\u0100' } },
      { name: 'an empty path', req: { path: '' } },
    ];
    for (const c of cases) {
      it(`refuses ${c.name} with ${H1ErrorCode.invalidRequest} inside dispatch and sends nothing`, async () => {
        const node = await RawNode.start(echo);
        const client = newClient(node.origin);
        const r = call(client, c.req);
        assert.equal(
          r.code,
          H1ErrorCode.invalidRequest,
          `error inside dispatch: ${r.error?.message ?? 'none'}`,
        );
        assert.deepEqual(r.events, [`error ${H1ErrorCode.invalidRequest}`]);
        assert.equal(client.connections, 0, 'no connection opened for it');
        await fetchOk(client, { path: '/valid' });
        assert.equal(node.conns.length, 1);
        assert.equal(
          receivedOn(node.conns[0]!),
          node.requests[0]!.head,
          'the node got the valid request only',
        );
        assert.deepEqual(node.paths, ['/valid']);
      });
    }

    it('accepts HTAB, obs-text and visible punctuation in header values and percent-encoded paths', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, {
        path: '/caf%C3%A9?q=a&b=%2F',
        headers: ['x-a', 'a\tb \u00e9 !"#$%&()*+,-./:;<=>?@[]^_`{|}~'],
      });
      assert.match(
        node.requests[0]!.head,
        /\r\nx-a: a\tb \u00e9 !"#\$%&\(\)\*\+,-\.\/:;<=>\?@\[\]\^_`\{\|\}~\r\n/,
      );
      assert.equal(node.requests[0]!.path, '/caf%C3%A9?q=a&b=%2F');
    });
  });

  describe('bytes beyond the answer', () => {
    for (const [name, answer] of [
      ['a Content-Length answer', `${ok('hi')}HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad`],
      [
        'a chunked answer',
        'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nsmuggled',
      ],
      ['a 204 answer', 'HTTP/1.1 204 No Content\r\n\r\nextra'],
    ] as const) {
      it(`completes ${name} followed by more bytes in the same packet and does not reuse the connection`, async () => {
        const node = await RawNode.start(firstThen({ pieces: [answer] }));
        const client = newClient(node.origin);
        const r = await fetchOk(client, { path: '/extra' });
        assert.equal(r.body, answer.includes('204') ? '' : 'hi');
        await node.conns[0]!.waitClosed('the client to drop the connection');
        await fetchOk(client, { path: '/next' });
        assert.equal(node.conns.length, 2);
      });
    }

    it('drops an idle connection on which the node sends bytes nobody asked for', async () => {
      const node = await RawNode.start(firstThen({ pieces: [ok('hi'), 'HTTP/1.1 200 OK\r\n'], gapMs: 20 }));
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/first' });
      await node.conns[0]!.waitClosed('the client to drop the connection');
      await fetchOk(client, { path: '/next' });
      assert.equal(node.conns.length, 2);
    });
  });

  describe('idle connections', () => {
    it('drops an idle connection the node closed; the next request opens a new one and succeeds', async () => {
      const node = await RawNode.start((req) => ({
        pieces: [ok(req.path)],
        then: req.index === 0 ? 'end' : undefined,
      }));
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/first' });
      await waitFor(() => client.connections === 0, 'the client to drop the closed connection');
      const r = await fetchOk(client, { path: '/second' });
      assert.equal(r.body, '/second');
      assert.equal(node.conns.length, 2);
    });

    it('closes an idle connection itself after the node said Keep-Alive: timeout=1', async () => {
      const node = await RawNode.start(() => ({ pieces: [ok('hi', 'Keep-Alive: timeout=1, max=100\r\n')] }));
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/hint' });
      assert.equal(client.connections, 1);
      await waitFor(() => client.connections === 0, 'the client to close the idle connection', 4000);
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
      assert.equal(node.conns.length, 2);
    });

    it('does not reuse a connection that has been idle longer than keepAliveMs', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin, { keepAliveMs: 100 });
      await fetchOk(client, { path: '/first' });
      // Idle for 4 times keepAliveMs (well before a 1 s sweep would close it).
      await delay(400);
      await fetchOk(client, { path: '/second' });
      assert.notEqual(
        node.requests[1]!.conn.id,
        node.requests[0]!.conn.id,
        'the stale connection was reused',
      );
    });

    it("does not reuse a connection idle longer than the node's Keep-Alive timeout less the leeway", async () => {
      // Two connections: /a parks first, so the idle sweep runs on /a's schedule; /b says
      // `Keep-Alive: timeout=2` (reuse for 1 s at most) and parks 200 ms later.
      const node = await RawNode.start((req) =>
        req.path === '/b'
          ? { pieces: [ok('b', 'Keep-Alive: timeout=2\r\n')], delayMs: 200 }
          : { pieces: [ok(req.path)] },
      );
      const client = newClient(node.origin);
      const a = call(client, { path: '/a' });
      const b = call(client, { path: '/b' });
      await a.settled();
      await b.settled();
      const bConn = node.requests.find((r) => r.path === '/b')!.conn.id;
      // 1.4 s after /b: past its 1 s, before the sweep at 2 s after /a closes it.
      await delay(1400);
      await fetchOk(client, { path: '/c' });
      const cConn = node.requests.find((r) => r.path === '/c')!.conn.id;
      assert.notEqual(cConn, bConn, "the connection was reused past the node's keep-alive less the leeway");
    });
  });

  describe('per-call timers', () => {
    it(`fails with ${H1ErrorCode.headersTimeout} when no head comes within ttfbMs, and drops the connection`, async () => {
      const node = await RawNode.start(firstThen(null));
      const client = newClient(node.origin);
      const r = await call(client, { path: '/silent', ttfbMs: 60 }).settled();
      assert.equal(r.code, H1ErrorCode.headersTimeout);
      assert.deepEqual(r.events, ['connect', `error ${H1ErrorCode.headersTimeout}`]);
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
    });

    it(`fails with ${H1ErrorCode.bodyTimeout} when a body gap exceeds idleMs, after the bytes before it`, async () => {
      const node = await RawNode.start(
        firstThen({ pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc'] }),
      );
      const client = newClient(node.origin);
      const r = await call(client, { path: '/gap', idleMs: 60 }).settled();
      assert.equal(r.code, H1ErrorCode.bodyTimeout);
      assert.equal(r.status, 200);
      assert.equal(r.body, 'abc');
      await node.conns[0]!.waitClosed();
      await fetchOk(client, { path: '/next' });
    });

    it(`fails with ${H1ErrorCode.bodyTimeout} when a chunked body stops after its head`, async () => {
      const node = await RawNode.start(
        firstThen({ pieces: ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'] }),
      );
      const client = newClient(node.origin);
      const r = await call(client, { path: '/gap', idleMs: 60, ttfbMs: 1000 }).settled();
      assert.equal(r.code, H1ErrorCode.bodyTimeout);
    });

    it('applies ttfbMs to the head only and idleMs to each gap, so a slow body with short gaps completes', async () => {
      const node = await RawNode.start(
        firstThen({
          pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n', 'a', 'b', 'c', 'd', 'e'],
          gapMs: 40,
        }),
      );
      const client = newClient(node.origin);
      const r = await fetchOk(client, { path: '/slow', ttfbMs: 60, idleMs: 150 });
      assert.equal(r.body, 'abcde');
    });

    it('clears the timers when the exchange ends, so nothing fires on the connection afterwards', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      const r1 = await fetchOk(client, { path: '/quick', ttfbMs: 30, idleMs: 30 });
      await delay(100);
      assert.deepEqual(r1.events, ['connect', 'headers 200', 'data 10', 'complete']);
      await fetchOk(client, { path: '/again' });
      assert.equal(node.conns.length, 1);
    });
  });

  describe('close and destroy', () => {
    it('close() resolves after the running exchange completes normally, then closes the connection', async () => {
      const node = await RawNode.start((req) => ({ pieces: [ok(req.path)], delayMs: 60 }));
      const client = newClient(node.origin);
      const order: string[] = [];
      const r = call(client, { path: '/running' }, { onComplete: () => order.push('complete') });
      await waitFor(() => node.requests.length === 1, 'the request at the node');
      const closed = client.close().then(() => order.push('closed'));
      await within(closed, WAIT_MS, 'close() to resolve');
      assert.deepEqual(order, ['complete', 'closed']);
      assert.equal(r.error, null);
      assert.equal(r.body, '/running');
      await node.conns[0]!.waitClosed();
      const late = call(client, { path: '/late' });
      assert.equal(late.code, H1ErrorCode.closedClient, 'dispatch after close errs inside dispatch');
      assert.equal(node.requests.length, 1);
    });

    it('close() waits for queued exchanges too', async () => {
      const node = await RawNode.start((req) => ({ pieces: [ok(req.path)], delayMs: 10 }));
      const client = newClient(node.origin, { connections: 1 });
      const rs = [call(client, { path: '/1' }), call(client, { path: '/2' }), call(client, { path: '/3' })];
      await within(client.close(), WAIT_MS, 'close() to resolve');
      assert.deepEqual(
        rs.map((r) => r.completed),
        [true, true, true],
      );
      assert.deepEqual(node.paths, ['/1', '/2', '/3']);
    });

    it('close() right after a dispatch onto an idle connection waits for that exchange', async () => {
      const node = await RawNode.start((req) => ({ pieces: [ok(req.path)], delayMs: 20 }));
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/warm' });
      const order: string[] = [];
      const r = call(client, { path: '/reused' }, { onComplete: () => order.push('complete') });
      await within(
        client.close().then(() => order.push('closed')),
        WAIT_MS,
        'close() to resolve',
      );
      await r.settled();
      assert.equal(r.error, null);
      assert.deepEqual(
        order,
        ['complete', 'closed'],
        'close() resolved before the exchange it had to wait for',
      );
    });

    it('close() with nothing running resolves at once and closes the idle connections', async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/a' });
      await within(client.close(), WAIT_MS, 'close() to resolve');
      await node.conns[0]!.waitClosed();
      assert.equal(client.connections, 0);
    });

    it(`destroy() fails running and queued exchanges with ${H1ErrorCode.closedClient} and closes the connection`, async () => {
      const node = await RawNode.start(() => null);
      const client = newClient(node.origin, { connections: 1 });
      const running = call(client, { path: '/running' });
      const queued = call(client, { path: '/queued' });
      await waitFor(() => node.requests.length === 1, 'the first request at the node');
      await client.destroy();
      assert.equal(running.code, H1ErrorCode.closedClient);
      assert.equal(queued.code, H1ErrorCode.closedClient);
      assert.deepEqual(queued.events, [`error ${H1ErrorCode.closedClient}`]);
      await node.conns[0]!.waitClosed();
      assert.equal(call(client, { path: '/after' }).code, H1ErrorCode.closedClient);
      assert.equal(node.requests.length, 1);
    });

    it(`destroy() right after a dispatch onto an idle connection fails it with ${H1ErrorCode.closedClient} and sends nothing`, async () => {
      const node = await RawNode.start(echo);
      const client = newClient(node.origin);
      await fetchOk(client, { path: '/warm' });
      const r = call(client, { path: '/doomed' });
      await client.destroy();
      await r.settled();
      assert.equal(r.code, H1ErrorCode.closedClient);
      await node.conns[0]!.waitClosed();
      assert.deepEqual(node.paths, ['/warm']);
    });

    it('destroy() mid-body stops the body at once', async () => {
      const node = await RawNode.start(() => ({
        pieces: ['HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nabc', 'def'],
        gapMs: 50,
      }));
      const client = newClient(node.origin);
      const r = call(client, { path: '/body' });
      await waitFor(() => r.chunks.length === 1, 'the first piece');
      await client.destroy();
      assert.equal(r.code, H1ErrorCode.closedClient);
      await replied(node);
      assert.equal(r.body, 'abc');
    });
  });
});
