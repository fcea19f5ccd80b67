/**
 * A node that streams faster than any client reads, and a client that reads nothing: the two ends
 * of the backpressure and slow-reader tests. Test support only.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';

/** One SSE event of exactly 16 KiB. */
export const EVENT = Buffer.from(`data: ${'x'.repeat(16 * 1024 - 8)}\n\n`, 'latin1');
/** Events per stream: 64 MiB, far more than loopback socket buffers hold on both hops. */
export const EVENTS = 4096;
export const TOTAL_BYTES = EVENTS * EVENT.length;

/** Chunk `i` of the sized body: EVENT-sized and numbered, so a lost, repeated or shifted byte shows. */
export function sizedChunk(i: number): Buffer {
  const b = Buffer.from(EVENT);
  for (let at = 0; at < b.length; at += 4096) b.writeUInt32BE(i, at);
  return b;
}

/**
 * A node that streams `EVENTS` events (or, at `/sized`, the chunks of a body with a Content-Length)
 * as fast as its socket takes them, honouring `drain`, and records how far it got. It stands in for
 * an inference node producing faster than the client reads, which a simulated node with realistic
 * token rates cannot do within a test's time.
 */
export class FloodNode {
  readonly server: Server;
  /** Bytes handed to the socket so far. */
  sent = 0;
  /** True once the whole stream was written. */
  finished = false;
  /** True while the node waits for `drain`. */
  blocked = false;
  /** True when the stream was cut (the proxy closed it) before the node finished it. */
  aborted = false;

  constructor() {
    this.server = createServer((req, res) => {
      const sized = req.url === '/sized';
      this.sent = 0;
      this.finished = false;
      this.aborted = false;
      res.once('close', () => {
        if (!this.finished) this.aborted = true;
      });
      if (sized) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': TOTAL_BYTES });
      } else {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
      }
      this.pump(res, 0, sized);
    });
  }

  get url(): string {
    const a = this.server.address();
    return `http://127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}`;
  }

  private pump(res: ServerResponse, from: number, sized: boolean): void {
    this.blocked = false;
    let i = from;
    while (i < EVENTS) {
      const ok = res.write(sized ? sizedChunk(i) : EVENT);
      this.sent += EVENT.length;
      i++;
      if (!ok) {
        this.blocked = true;
        res.once('drain', () => this.pump(res, i, sized));
        return;
      }
    }
    res.end(() => (this.finished = true));
  }
}

/** Sends a streaming chat request to `path` on a raw socket that reads nothing until `resume`. */
export function slowClient(url: string, path = '/v1/chat/completions'): Socket {
  const u = new URL(url);
  const socket = connect({ host: u.hostname, port: Number(u.port) });
  socket.pause();
  const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return socket;
}

/** Resolves once `sample()` has not changed for `quietMs`; rejects after `timeoutMs`. */
export async function settled(sample: () => number, quietMs: number, timeoutMs: number): Promise<number> {
  let last = sample();
  let since = Date.now();
  const deadline = since + timeoutMs;
  for (;;) {
    await new Promise((r) => setTimeout(r, 25));
    const now = sample();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) {
      return now;
    }
    if (Date.now() > deadline) throw new Error(`still moving after ${timeoutMs} ms (${now})`);
  }
}
