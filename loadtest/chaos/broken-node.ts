/**
 * A misbehaving upstream node over raw `node:net`: it reads HTTP/1.1 requests and answers each one
 * with the scripted fault named in its `x-fault` header (reset before the head, stall after it,
 * conflicting framing, a bad chunk, a short body, malformed SSE, death mid-stream, ...), or a
 * correct answer without one. It numbers its connections and records which connection carried
 * each request and which connections closed, so a test can tell whether the proxy reused a broken
 * connection. Used by the broken-node table (`npm test`, `npm run chaos`).
 */
import { createServer, type Server, type Socket } from 'node:net';

/** One request as the node read it. */
export interface SeenRequest {
  /** Connection number (1 for the first accepted connection). */
  conn: number;
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Map<string, string>;
  body: Buffer;
  /** The `x-fault` header, or '' for a correct answer. */
  fault: string;
}

/** What a fault does with the connection of the request it answers. */
export type FaultScript = (socket: Socket, req: SeenRequest) => void;

/** A well-formed JSON chat answer with usage. */
export const OK_JSON = JSON.stringify({
  id: 'x',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
});

/** The events of a well-formed streamed answer (usage in the last data event). */
export const OK_SSE_EVENTS = [
  'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
  'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n',
  'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n',
  'data: [DONE]\n\n',
];

function chunk(s: string | Buffer): string {
  const b = typeof s === 'string' ? Buffer.from(s) : s;
  return `${b.length.toString(16)}\r\n${b.toString('latin1')}\r\n`;
}

const SSE_HEAD =
  'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n';

function jsonHead(length: number | string, extra = ''): string {
  return `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;
}

function write(socket: Socket, s: string): void {
  socket.write(Buffer.from(s, 'latin1'));
}

/** The faults, by `x-fault` value. */
export const FAULTS: Readonly<Record<string, FaultScript>> = {
  '': (s) => write(s, jsonHead(Buffer.byteLength(OK_JSON)) + OK_JSON),
  'ok-sse': (s) => write(s, SSE_HEAD + OK_SSE_EVENTS.map(chunk).join('') + '0\r\n\r\n'),
  'reset-before-head': (s) => s.resetAndDestroy(),
  'close-before-head': (s) => s.end(),
  'stall-before-head': () => undefined,
  'partial-head': (s) => write(s, 'HTTP/1.1 200 OK\r\ncontent-type: applic'),
  'partial-head-close': (s) => {
    write(s, 'HTTP/1.1 200 OK\r\ncontent-type: applic');
    s.end();
  },
  'garbage-status': (s) => write(s, 'HELLO THERE\r\n\r\n'),
  'bad-status-code': (s) => write(s, 'HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n'),
  'nul-in-header': (s) => write(s, 'HTTP/1.1 200 OK\r\nx-bad: a\0b\r\ncontent-length: 2\r\n\r\n{}'),
  'space-before-colon': (s) => write(s, 'HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\n{}'),
  'obs-fold': (s) => write(s, 'HTTP/1.1 200 OK\r\nx-a: b\r\n c\r\ncontent-length: 2\r\n\r\n{}'),
  'huge-head': (s) =>
    write(s, `HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(70_000)}\r\ncontent-length: 2\r\n\r\n{}`),
  'duplicate-content-length': (s) => write(s, jsonHead(2, 'content-length: 2\r\n') + '{}'),
  'conflicting-content-length': (s) => write(s, jsonHead(2, 'content-length: 3\r\n') + '{}'),
  'content-length-list': (s) => write(s, jsonHead('2, 2') + '{}'),
  'content-length-plus': (s) => write(s, jsonHead('+2') + '{}'),
  'content-length-negative': (s) => write(s, jsonHead('-1') + '{}'),
  'content-length-and-chunked': (s) =>
    write(s, jsonHead(2, 'transfer-encoding: chunked\r\n') + chunk('{}') + '0\r\n\r\n'),
  'unknown-transfer-encoding': (s) =>
    write(
      s,
      'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n' +
        chunk('{}') +
        '0\r\n\r\n',
    ),
  'bad-chunk-size': (s) => write(s, SSE_HEAD + 'zz\r\nhello\r\n'),
  'bad-chunk-after-data': (s) => write(s, SSE_HEAD + chunk(OK_SSE_EVENTS[0]!) + 'zz\r\nhello\r\n'),
  'chunk-overrun': (s) => write(s, SSE_HEAD + '3\r\nabcdef\r\n'),
  'short-body': (s) => {
    write(s, jsonHead(100) + OK_JSON.slice(0, 10));
    s.end();
  },
  'short-body-stall': (s) => write(s, jsonHead(100) + OK_JSON.slice(0, 10)),
  'long-body': (s) => write(s, jsonHead(2) + '{}' + 'HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\npoisoned!'),
  'sse-no-terminator': (s) => {
    write(s, SSE_HEAD + chunk(OK_SSE_EVENTS[0]!));
    s.end();
  },
  'malformed-sse': (s) =>
    write(
      s,
      SSE_HEAD +
        chunk('data: {not json\n\n') +
        chunk(': comment\r\ndata\rdata:\n\nevent: x\nid: \0\n') +
        chunk(Buffer.from([0xff, 0xfe, 0x00, 0x0a, 0x0a])) +
        chunk(`data: ${'y'.repeat(70_000)}\n\n`) +
        chunk('data: {"usage":{"total_tokens":"many"}}\n\n') +
        chunk('data: {"usage": {"total_tokens": 99999999999999999999999}}\n\n') +
        '0\r\n\r\n',
    ),
  'stall-after-head': (s) => write(s, SSE_HEAD),
  'stall-mid-stream': (s) => write(s, SSE_HEAD + chunk(OK_SSE_EVENTS[0]!)),
  'die-mid-stream': (s) => {
    write(s, SSE_HEAD + chunk(OK_SSE_EVENTS[0]!) + chunk(OK_SSE_EVENTS[1]!));
    setTimeout(() => s.resetAndDestroy(), 20);
  },
  'close-mid-stream': (s) => {
    write(s, SSE_HEAD + chunk(OK_SSE_EVENTS[0]!));
    setTimeout(() => s.end(), 20);
  },
  'die-mid-json': (s) => {
    write(
      s,
      'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n' +
        chunk('{"a":'),
    );
    setTimeout(() => s.resetAndDestroy(), 20);
  },
  'informational-then-close': (s) => {
    write(s, 'HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n');
    s.end();
  },
};

interface ConnState {
  n: number;
  socket: Socket;
  buf: Buffer;
  closed: boolean;
}

export class BrokenNode {
  readonly server: Server;
  url = '';
  /** Every request read, in arrival order. */
  readonly requests: SeenRequest[] = [];
  /** Connections accepted so far. */
  accepted = 0;
  private readonly conns = new Map<number, ConnState>();
  private readonly waiters = new Set<() => void>();

  private constructor() {
    this.server = createServer((socket) => this.onConnection(socket));
  }

  /** Starts a node on 127.0.0.1, port 0. */
  static async start(): Promise<BrokenNode> {
    const n = new BrokenNode();
    await new Promise<void>((resolve) => n.server.listen(0, '127.0.0.1', resolve));
    const a = n.server.address();
    n.url = `http://127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}`;
    return n;
  }

  /** Connections still open. */
  get openConnections(): number {
    let k = 0;
    for (const c of this.conns.values()) if (!c.closed) k++;
    return k;
  }

  /** True when connection `n` was closed (by either side). */
  isClosed(n: number): boolean {
    return this.conns.get(n)?.closed ?? true;
  }

  /** The last request with `fault` (or undefined). */
  last(fault: string): SeenRequest | undefined {
    for (let i = this.requests.length - 1; i >= 0; i--)
      if (this.requests[i]!.fault === fault) return this.requests[i];
    return undefined;
  }

  /** Resolves once `check` holds (re-checked on every event of the node) or rejects after `ms`. */
  async until(check: () => boolean, ms: number, what: string): Promise<void> {
    const deadline = Date.now() + ms;
    while (!check()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`broken node: timed out waiting for ${what}`);
      await this.nextEvent(Math.min(left, 50));
    }
  }

  /** Resolves on the node's next event (connection, request, close) or after `ms`. */
  private nextEvent(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  /** Closes the listener and destroys every connection. */
  async close(): Promise<void> {
    for (const c of this.conns.values()) c.socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }

  private onConnection(socket: Socket): void {
    const c: ConnState = { n: ++this.accepted, socket, buf: Buffer.alloc(0), closed: false };
    this.conns.set(c.n, c);
    socket.on('data', (d: Buffer) => {
      c.buf = Buffer.concat([c.buf, d]);
      this.parse(c);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      c.closed = true;
      this.wake();
    });
    this.wake();
  }

  private parse(c: ConnState): void {
    for (;;) {
      const end = c.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const lines = c.buf.subarray(0, end).toString('latin1').split('\r\n');
      const [method = '', path = ''] = (lines[0] ?? '').split(' ');
      const headers = new Map<string, string>();
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
      }
      const length = Number(headers.get('content-length') ?? '0');
      if (c.buf.length < end + 4 + length) return;
      const body = Buffer.from(c.buf.subarray(end + 4, end + 4 + length));
      c.buf = c.buf.subarray(end + 4 + length);
      const fault = headers.get('x-fault') ?? '';
      const req: SeenRequest = { conn: c.n, method, path, headers, body, fault };
      this.requests.push(req);
      this.wake();
      const script = FAULTS[fault];
      if (script === undefined) {
        write(c.socket, 'HTTP/1.1 400 Bad Request\r\ncontent-length: 13\r\n\r\nunknown fault');
        continue;
      }
      script(c.socket, req);
    }
  }
}
