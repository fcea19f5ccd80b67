/**
 * Answers without content (RFC 9110 §6.4.1): a node's 204 and its answers to HEAD reach the client
 * with no body and no invented length, and Sluice's own replies to HEAD (an error) carry their
 * headers without their body. On both listener engines the connection then serves the next request.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection, rawHeader, type RawResponse } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** What the node answers to each path (HEAD or not: a node's answer to HEAD has no body). */
const ANSWERS: Record<string, string> = {
  '/204': 'HTTP/1.1 204 No Content\r\nX-Node: yes\r\n\r\n',
  '/sized': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n',
  '/chunked': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n',
  '/ok': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok',
};

/** Sends `request` on `c` and reads its answer; `noBody` for HEAD. */
async function exchange(c: RawConnection, request: string, noBody: boolean): Promise<RawResponse> {
  await c.write(request);
  return c.readResponse(5000, noBody);
}

/** Waits 150 ms and checks that nothing followed the head (no body, no stray length). */
async function nothingMore(c: RawConnection, what: string): Promise<void> {
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(c.pending.toString('latin1'), '', `bytes after the head of ${what}`);
}

describe('answers without content', { timeout: 60_000 }, () => {
  let node: Server | null = null;
  let nodeUrl = '';
  const sockets = new Set<Socket>();

  before(async () => {
    node = createServer((s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      let buf = '';
      s.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        for (let end = buf.indexOf('\r\n\r\n'); end >= 0; end = buf.indexOf('\r\n\r\n')) {
          const [method, path] = buf.slice(0, end).split(' ');
          buf = buf.slice(end + 4);
          if (path === '/close') {
            s.destroy();
            return;
          }
          const answer = ANSWERS[path ?? ''] ?? ANSWERS['/ok']!;
          // A node's answer to HEAD is its head alone.
          s.write(method === 'HEAD' ? answer.slice(0, answer.indexOf('\r\n\r\n') + 4) : answer);
        }
      });
    });
    await new Promise<void>((resolve) => node!.listen(0, '127.0.0.1', resolve));
    const addr = node.address();
    nodeUrl = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => (node === null ? resolve() : node.close(() => resolve())));
  });

  for (const engine of ENGINES) {
    describe(`${engine.name} listener`, () => {
      let t: TestSluice | null = null;
      let c: RawConnection | null = null;
      /** Every connection a test opened: closed in `after`, whichever test failed. */
      const open: RawConnection[] = [];
      before(async () => {
        t = await startTestSluice(
          withListenerKeys(basicConfig([nodeUrl]), { pipelining: engine.pipelining }),
        );
      });
      after(async () => {
        for (const o of open) o.destroy();
        await t?.close();
      });

      it("passes a node's 204 on without a length, and the connection serves the next request", async () => {
        c = await RawConnection.open(t!.url);
        open.push(c);
        const r = await exchange(c, 'GET /204 HTTP/1.1\r\nHost: a\r\n\r\n', false);
        assert.equal(r.status, 204);
        assert.equal(rawHeader(r, 'x-node'), 'yes');
        assert.equal(rawHeader(r, 'content-length'), undefined);
        assert.equal(rawHeader(r, 'transfer-encoding'), undefined);
        await nothingMore(c, 'the 204');
        const next = await exchange(c, 'GET /ok HTTP/1.1\r\nHost: a\r\n\r\n', false);
        assert.equal(next.status, 200);
        assert.equal(next.body.toString(), 'ok');
      });

      it("answers HEAD with the node's length and no body, and the connection serves the next request", async () => {
        c = await RawConnection.open(t!.url);
        open.push(c);
        const r = await exchange(c, 'HEAD /sized HTTP/1.1\r\nHost: a\r\n\r\n', true);
        assert.equal(r.status, 200);
        assert.equal(rawHeader(r, 'content-length'), '5');
        await nothingMore(c, 'the answer to HEAD');
        const chunked = await exchange(c, 'HEAD /chunked HTTP/1.1\r\nHost: a\r\n\r\n', true);
        assert.equal(chunked.status, 200);
        assert.equal(rawHeader(chunked, 'content-length'), undefined, 'a length the node never sent');
        await nothingMore(c, 'the answer to HEAD of a chunked resource');
        const next = await exchange(c, 'GET /ok HTTP/1.1\r\nHost: a\r\n\r\n', false);
        assert.equal(next.status, 200);
        assert.equal(next.body.toString(), 'ok');
      });

      it('answers HEAD with the headers of its own error reply, without the body', async () => {
        c = await RawConnection.open(t!.url);
        open.push(c);
        const r = await exchange(c, 'HEAD /close HTTP/1.1\r\nHost: a\r\n\r\n', true);
        assert.equal(r.status, 502);
        assert.equal(rawHeader(r, 'content-type'), 'application/json');
        const length = Number(rawHeader(r, 'content-length'));
        assert.ok(length > 0, `content-length ${rawHeader(r, 'content-length')}: the GET body's length`);
        await nothingMore(c, 'the 502 to HEAD');
        if (c.closed) return;
        const next = await exchange(c, 'GET /ok HTTP/1.1\r\nHost: a\r\n\r\n', false);
        assert.equal(next.status, 200);
      });

      it('answers a HEAD it refuses and closes on with the head alone, then closes', async () => {
        c = await RawConnection.open(t!.url);
        open.push(c);
        // Larger than four times the default max_body_bytes (10 MiB): refused before any byte of it
        // is read, and too large for uWS to read and drop.
        const r = await exchange(
          c,
          'HEAD /sized HTTP/1.1\r\nHost: a\r\nContent-Length: 50000000\r\n\r\n',
          true,
        );
        assert.equal(r.status, 413);
        const length = rawHeader(r, 'content-length');
        if (engine.pipelining === 0) {
          // uWS cannot announce a length it does not send and then close (docs/security.md).
          assert.equal(length, '0');
        } else {
          assert.ok(Number(length) > 0, `content-length ${length}: the GET body's length`);
        }
        assert.equal(await c.waitClosed(2000), true, 'the connection closes after the refusal');
        assert.equal(c.pending.toString('latin1'), '', 'bytes after the head of the 413 to HEAD');
      });
    });
  }
});
