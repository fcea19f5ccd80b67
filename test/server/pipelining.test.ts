/**
 * HTTP/1.1 pipelining over raw sockets: a listener with `pipelining` > 0 (Sluice's own engine)
 * serves pipelined requests in order whatever the packet boundaries, stops at a framing error in
 * the middle of a pipeline, and stops reading a connection that has `pipelining` requests
 * unanswered. A uWS listener (`pipelining: 0`) closes a connection that pipelines, as documented.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import autocannon from 'autocannon';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { RawConnection, rawHeader, type RawResponse } from '../helpers/raw-http.js';
import { withListenerKeys } from '../helpers/engines.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const PIPELINE = 4;

/** A node that holds every response until `release()`, and counts the requests it received. */
class HeldNode {
  readonly server: Server;
  received = 0;
  private held: [IncomingMessage, ServerResponse, Buffer][] = [];
  private releasing = false;

  constructor() {
    this.server = createServer((req, res) => {
      this.received++;
      const parts: Buffer[] = [];
      req.on('data', (d: Buffer) => parts.push(d));
      req.on('end', () => {
        this.held.push([req, res, Buffer.concat(parts)]);
        if (this.releasing) this.release();
      });
    });
  }

  get url(): string {
    const a = this.server.address();
    return `http://127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}`;
  }

  /** Answers every held request (and, from now on, every new one) with its `x-seq` and body hash. */
  release(): void {
    this.releasing = true;
    for (const [req, res, body] of this.held.splice(0)) {
      const text = JSON.stringify({
        seq: req.headers['x-seq'],
        sha256: createHash('sha256').update(body).digest('hex'),
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(text);
    }
  }
}

/** A POST to the node's echo endpoint with a distinct body. */
function echoRequest(i: number): { bytes: Buffer; body: Buffer } {
  const body = Buffer.from(JSON.stringify({ i, pad: 'p'.repeat(37 * i + 3) }));
  const head = `POST /debug/echo?i=${i} HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  return { bytes: Buffer.concat([Buffer.from(head, 'latin1'), body]), body };
}

/** Writes `data` cut at `cuts` (byte offsets), one write per piece, each flushed before the next. */
async function writeInPieces(conn: RawConnection, data: Buffer, cuts: number[]): Promise<void> {
  let from = 0;
  for (const cut of [...cuts, data.length]) {
    if (cut <= from) continue;
    await conn.write(data.subarray(from, cut));
    await new Promise((r) => setImmediate(r));
    from = cut;
  }
}

function echoOf(r: RawResponse): { url: string; body_sha256: string } {
  return JSON.parse(r.body.toString('utf8')) as { url: string; body_sha256: string };
}

describe('pipelining on a listener with pipelining > 0', { timeout: 120_000 }, () => {
  let fleet: SimFleet;
  let held: HeldNode;
  let t: TestSluice;
  let h: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(withListenerKeys(basicConfig(fleet.urls), { pipelining: 16 }));
    held = new HeldNode();
    await new Promise<void>((resolve) => held.server.listen(0, '127.0.0.1', resolve));
    h = await startTestSluice(withListenerKeys(basicConfig([held.url]), { pipelining: PIPELINE }));
  });

  after(async () => {
    await t?.close();
    await h?.close();
    await fleet?.close();
    if (held !== undefined) {
      held.server.closeAllConnections();
      await new Promise<void>((resolve) => held.server.close(() => resolve()));
    }
  });

  it('answers 10 pipelined POSTs in order with their own bodies, whatever the packet boundaries', async () => {
    const reqs = Array.from({ length: 10 }, (_, i) => echoRequest(i));
    const all = Buffer.concat(reqs.map((r) => r.bytes));
    // Cuts inside a request line, inside a header name, between CR and LF, inside a body, and
    // packets that carry the end of one request and several whole ones.
    const starts: number[] = [];
    let at = 0;
    for (const r of reqs) {
      starts.push(at);
      at += r.bytes.length;
    }
    const cuts = [
      starts[0]! + 3,
      starts[0]! + 30,
      starts[1]! - 7,
      all.indexOf('\r\n\r\n', starts[1]) + 1,
      starts[2]! + 11,
      starts[5]! + 2,
      starts[5]! + 70,
      starts[9]! - 1,
    ].sort((a, b) => a - b);
    const before = fleet.nodes[0]!.stats().received;
    const conn = await RawConnection.open(t.url);
    try {
      await writeInPieces(conn, all, cuts);
      for (let i = 0; i < 10; i++) {
        const r = await conn.readResponse();
        assert.equal(r.status, 200, r.body.toString());
        const echo = echoOf(r);
        assert.equal(echo.url, `/debug/echo?i=${i}`, 'responses out of request order');
        assert.equal(echo.body_sha256, createHash('sha256').update(reqs[i]!.body).digest('hex'));
      }
      assert.equal(conn.closed, false, 'the connection stays open after a pipeline');
    } finally {
      conn.destroy();
    }
    assert.equal(fleet.nodes[0]!.stats().received - before, 10);
  });

  it('answers the requests before a framing error, refuses it, closes, and never forwards what follows', async () => {
    const good = (i: number): string => `GET /debug/echo?i=${i} HTTP/1.1\r\nHost: sluice.test\r\n\r\n`;
    const bad = 'GET /debug/echo?i=bad HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n';
    const before = fleet.nodes[0]!.stats().received;
    const conn = await RawConnection.open(t.url);
    try {
      await conn.write(good(0) + good(1) + good(2) + bad + good(3) + good(4));
      for (let i = 0; i < 3; i++) {
        const r = await conn.readResponse();
        assert.equal(r.status, 200);
        assert.equal(echoOf(r).url, `/debug/echo?i=${i}`);
      }
      const refusal = await conn.readResponse();
      assert.equal(refusal.status, 400);
      assert.match(refusal.body.toString(), /bad_framing/);
      assert.equal(rawHeader(refusal, 'connection'), 'close');
      assert.equal(await conn.waitClosed(), true, 'the server kept the connection open');
      assert.equal(conn.pending.length, 0, `bytes after the refusal: ${conn.pending.toString('latin1')}`);
    } finally {
      conn.destroy();
    }
    assert.equal(fleet.nodes[0]!.stats().received - before, 3, 'the node saw a request behind the error');
  });

  it(`holds at most ${PIPELINE} unanswered requests per connection and does not read the socket beyond them`, async () => {
    const body = Buffer.alloc(256 * 1024, 'b');
    const count = 64; // 16 MiB of requests: more than loopback socket buffers hold
    const conn = await RawConnection.open(h.url);
    try {
      for (let i = 0; i < count; i++) {
        conn.socket.write(
          `POST /held HTTP/1.1\r\nHost: sluice.test\r\nX-Seq: ${i}\r\nContent-Length: ${body.length}\r\n\r\n`,
          'latin1',
        );
        conn.socket.write(body);
      }
      await waitFor(() => held.received === PIPELINE, 10_000, `${PIPELINE} requests at the node`);
      // The kernel's socket buffers go on taking bytes for a moment after the fourth request
      // arrived: wait until the client's backlog stops shrinking (100 ms without a change), then
      // give the pipeline time to overrun its limit if it were going to. A Sluice that kept reading
      // would keep it shrinking: the wait ends after 5 s whatever, and the check below fails.
      let stalledAt = conn.socket.writableLength;
      const giveUpAt = Date.now() + 5000;
      for (let quietSince = Date.now(); Date.now() - quietSince < 100 && Date.now() < giveUpAt;) {
        await new Promise((r) => setTimeout(r, 20));
        const now = conn.socket.writableLength;
        if (now !== stalledAt) {
          stalledAt = now;
          quietSince = Date.now();
        }
      }
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(held.received, PIPELINE, 'requests beyond the limit reached the node');
      assert.ok(
        conn.socket.writableLength > 0 && conn.socket.writableLength === stalledAt,
        `the client could write everything (${conn.socket.writableLength} bytes left): Sluice kept reading`,
      );
      held.release();
      const sha = createHash('sha256').update(body).digest('hex');
      for (let i = 0; i < count; i++) {
        const r = await conn.readResponse(15_000);
        assert.equal(r.status, 200, r.body.toString());
        const got = JSON.parse(r.body.toString()) as { seq: string; sha256: string };
        assert.equal(got.seq, String(i), 'responses out of request order');
        assert.equal(got.sha256, sha);
      }
    } finally {
      conn.destroy();
    }
    assert.equal(held.received, count);
  });

  it('sends 100 Continue to a client that waits for it, then reads the body', async () => {
    const body = '{"model":"m","prompt":"hi","max_tokens":1}';
    const conn = await RawConnection.open(t.url);
    try {
      await conn.write(
        `POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nExpect: 100-continue\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      const interim = await conn.readResponse();
      assert.equal(interim.status, 100);
      await conn.write(body);
      const r = await conn.readResponse();
      assert.equal(r.status, 200);
      assert.equal(echoOf(r).body_sha256, createHash('sha256').update(body).digest('hex'));
    } finally {
      conn.destroy();
    }
  });

  it('serves HTTP/1.0 with keep-alive when asked and closes after the response otherwise', async () => {
    const conn = await RawConnection.open(t.url);
    try {
      await conn.write('GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n');
      const first = await conn.readResponse();
      assert.equal(first.status, 200);
      assert.equal(rawHeader(first, 'connection'), 'keep-alive');
      await conn.write('GET /v1/models HTTP/1.0\r\n\r\n');
      const second = await conn.readResponse();
      assert.equal(second.status, 200);
      assert.equal(
        await conn.waitClosed(),
        true,
        'an HTTP/1.0 request without keep-alive left the connection open',
      );
    } finally {
      conn.destroy();
    }
  });

  it('completes an autocannon run with 10 pipelined requests per connection without errors or timeouts', async () => {
    const result = await autocannon({
      url: `${t.url}/v1/models`,
      connections: 4,
      pipelining: 10,
      duration: 2,
    });
    assert.equal(result.errors, 0, 'errors');
    assert.equal(result.timeouts, 0, 'timeouts');
    assert.equal(result.non2xx, 0, 'non-2xx responses');
    assert.ok(result.requests.total > 100, `only ${result.requests.total} requests`);
  });
});

describe('pipelining on a uWS listener (pipelining: 0)', { timeout: 30_000 }, () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig(fleet.urls));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('closes a connection that pipelines a second request before the first is answered', async () => {
    const conn = await RawConnection.open(t.url);
    try {
      const get = 'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n';
      await conn.write(get + get);
      assert.equal(await conn.waitClosed(), true, 'the connection stayed open');
      assert.equal(conn.pending.length, 0, 'uWS answered a pipelined request');
    } finally {
      conn.destroy();
    }
  });
});

describe('Expect: 100-continue behind a pipelined request', { timeout: 30_000 }, () => {
  const BODY_TIMEOUT_MS = 500;
  let held: HeldNode | undefined;
  let h: TestSluice | undefined;

  before(async () => {
    held = new HeldNode();
    await new Promise<void>((resolve) => held!.server.listen(0, '127.0.0.1', resolve));
    h = await startTestSluice(
      withListenerKeys(basicConfig([held.url]), { pipelining: PIPELINE, body_timeout_ms: BODY_TIMEOUT_MS }),
    );
  });

  after(async () => {
    await h?.close();
    if (held !== undefined) {
      held.server.closeAllConnections();
      await new Promise<void>((resolve) => held!.server.close(() => resolve()));
    }
  });

  it('sends 100 Continue once the request is first in line, and times its body from then', async () => {
    const body = '{"model":"m","prompt":"hi","max_tokens":1}';
    const conn = await RawConnection.open(h!.url);
    try {
      await conn.write(
        'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nX-Seq: 0\r\n\r\n' +
          `POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nX-Seq: 1\r\nExpect: 100-continue\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      await waitFor(() => held!.received === 1, 10_000, 'the first request at the node');
      // Longer than body_timeout_ms: a client waiting for its 100 is not late with its body.
      await assert.rejects(
        conn.waitForData(BODY_TIMEOUT_MS * 2),
        /timed out/,
        'an answer came while the first request was held',
      );
      held!.release();
      const first = await conn.readResponse();
      assert.equal(first.status, 200);
      const interim = await conn.readResponse();
      assert.equal(interim.status, 100, 'no 100 Continue once the request was first in line');
      await conn.write(body);
      const r = await conn.readResponse();
      assert.equal(r.status, 200, r.body.toString());
      const got = JSON.parse(r.body.toString()) as { seq: string; sha256: string };
      assert.equal(got.seq, '1');
      assert.equal(got.sha256, createHash('sha256').update(body).digest('hex'));
    } finally {
      conn.destroy();
    }
  });
});
