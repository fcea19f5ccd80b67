/**
 * Backpressure from a slow client back to the node, through a real Sluice (uWS downstream, undici
 * upstream, loopback TCP): a client that stops reading a long SSE stream must stall the node's
 * writes instead of letting Sluice buffer the stream, and the stream must resume and complete once
 * the client reads again. The same holds for a body with a Content-Length, which takes another
 * write path in the downstream (bytes uWS did not take are kept and re-offered when it drains).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

/** One SSE event of exactly 16 KiB. */
const EVENT = Buffer.from(`data: ${'x'.repeat(16 * 1024 - 8)}\n\n`, 'latin1');
/** Events per stream: 64 MiB, far more than loopback socket buffers hold on both hops. */
const EVENTS = 4096;
const TOTAL_BYTES = EVENTS * EVENT.length;

/** Chunk `i` of the sized body: EVENT-sized and numbered, so a lost, repeated or shifted byte shows. */
function sizedChunk(i: number): Buffer {
  const b = Buffer.from(EVENT);
  for (let at = 0; at < b.length; at += 4096) b.writeUInt32BE(i, at);
  return b;
}

/**
 * A node that streams `EVENTS` events (or, at `/sized`, the chunks of a body with a Content-Length)
 * as fast as its socket takes them, honouring `drain`, and records how far it got. It stands in for an inference node producing faster than the client
 * reads, which a simulated node with realistic token rates cannot do within a test's time.
 */
class FloodNode {
  readonly server: Server;
  /** Bytes handed to the socket so far. */
  sent = 0;
  /** True once the whole stream was written. */
  finished = false;
  /** True while the node waits for `drain`. */
  blocked = false;

  constructor() {
    this.server = createServer((req, res) => {
      const sized = req.url === '/sized';
      this.sent = 0;
      this.finished = false;
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
function slowClient(url: string, path = '/v1/chat/completions'): Socket {
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

/** Waits until the node is stalled by the client that reads nothing; returns the bytes it sent. */
async function assertStalled(node: FloodNode): Promise<number> {
  await waitFor(() => node.sent > 0, 5000, 'the node to start streaming');
  const stalledAt = await settled(() => node.sent, 500, 15_000);
  assert.ok(node.blocked, 'the node waits for drain: its socket is full');
  assert.ok(!node.finished, 'the node could not finish while the client read nothing');
  assert.ok(
    stalledAt <= TOTAL_BYTES / 2,
    `the node stalled after ${stalledAt} of ${TOTAL_BYTES} bytes; Sluice must not buffer the stream`,
  );
  return stalledAt;
}

/** Resolves once `sample()` has not changed for `quietMs`; rejects after `timeoutMs`. */
async function settled(sample: () => number, quietMs: number, timeoutMs: number): Promise<number> {
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

describe('backpressure', () => {
  let node: FloodNode;
  let t: TestSluice;

  before(async () => {
    node = new FloodNode();
    await new Promise<void>((resolve) => node.server.listen(0, '127.0.0.1', resolve));
    t = await startTestSluice(basicConfig([node.url]));
  });

  after(async () => {
    await t?.close();
    if (node === undefined) return;
    node.server.closeAllConnections();
    await new Promise<void>((resolve) => node.server.close(() => resolve()));
  });

  it('stalls the node on a body with a Content-Length too, then delivers it byte for byte', async () => {
    const want = createHash('sha256');
    for (let i = 0; i < EVENTS; i++) want.update(sizedChunk(i));
    const expected = want.digest('hex');
    const client = slowClient(t.url, '/sized');
    try {
      await assertStalled(node);

      const hash = createHash('sha256');
      let head = Buffer.alloc(0);
      let body = -1;
      const ended = new Promise<void>((resolve, reject) => {
        client.on('data', (d: Buffer) => {
          if (body < 0) {
            head = Buffer.concat([head, d]);
            const end = head.indexOf('\r\n\r\n');
            if (end < 0) return;
            const fields = head.toString('latin1', 0, end + 2).toLowerCase();
            if (!fields.includes(`\r\ncontent-length: ${TOTAL_BYTES}\r\n`)) {
              reject(new Error(`not a sized response: ${fields}`));
              return;
            }
            d = head.subarray(end + 4);
            body = 0;
          }
          body += d.length;
          hash.update(d);
          if (body >= TOTAL_BYTES) resolve();
        });
        client.once('close', () => reject(new Error(`closed after ${body} body bytes`)));
        setTimeout(() => reject(new Error(`body stuck after ${body} bytes`)), 15_000).unref();
      });
      client.resume();
      await ended;
      assert.ok(node.finished, 'the node finished once the client read again');
      assert.equal(body, TOTAL_BYTES);
      assert.equal(hash.digest('hex'), expected, 'the body arrived with bytes lost, repeated or moved');
    } finally {
      client.destroy();
    }
  });

  it('stalls the node while the client does not read, then delivers the whole stream once it does', async () => {
    const client = slowClient(t.url);
    try {
      await assertStalled(node);

      let received = 0;
      let tail = Buffer.alloc(0);
      const ended = new Promise<void>((resolve, reject) => {
        client.on('data', (d: Buffer) => {
          received += d.length;
          tail = Buffer.concat([tail, d]).subarray(-16);
          // The terminating zero-length chunk of the chunked response.
          if (tail.toString('latin1').endsWith('\r\n0\r\n\r\n')) resolve();
        });
        client.once('close', () => reject(new Error(`closed after ${received} bytes`)));
        setTimeout(() => reject(new Error(`stream stuck after ${received} bytes`)), 15_000).unref();
      });
      client.resume();
      await ended;
      assert.ok(node.finished, 'the node finished once the client read again');
      assert.ok(received > TOTAL_BYTES, `the client got ${received} bytes, the stream is ${TOTAL_BYTES}`);
    } finally {
      client.destroy();
    }
  });
});
