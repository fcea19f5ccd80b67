/**
 * Backpressure from a slow client back to the node, through a real Sluice (each downstream engine,
 * undici upstream, loopback TCP): a client that stops reading a long SSE stream must stall the node's
 * writes instead of letting Sluice buffer the stream, and the stream must resume and complete once
 * the client reads again. The same holds for a body with a Content-Length, which takes another
 * write path in the downstream (bytes uWS did not take are kept and re-offered when it drains).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { EVENTS, FloodNode, TOTAL_BYTES, settled, sizedChunk, slowClient } from '../helpers/flood-node.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

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

for (const engine of ENGINES) {
  describe(`backpressure on the ${engine.name} engine`, { timeout: 90_000 }, () => {
    let node: FloodNode;
    let t: TestSluice;

    before(async () => {
      node = new FloodNode();
      await new Promise<void>((resolve) => node.server.listen(0, '127.0.0.1', resolve));
      t = await startTestSluice(withListenerKeys(basicConfig([node.url]), { pipelining: engine.pipelining }));
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
}
