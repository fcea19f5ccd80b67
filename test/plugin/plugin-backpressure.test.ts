/**
 * Backpressure through a route with an onResponseChunk hook, on a real Sluice with a node that
 * streams as fast as its socket takes bytes and a client that reads nothing: an asynchronous chunk
 * hook pauses the node's body while it runs, and once it settles the node must stay paused while
 * the client cannot take more. It used to be resumed after every settled hook, so Sluice buffered
 * the whole stream for a slow client.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FloodNode, TOTAL_BYTES, settled, slowClient } from '../helpers/flood-node.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN } from './plugin-helpers.js';

function config(node: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - { name: sync-chunks, use: ${PROBE_PLUGIN}, options: { chunks: true } }
  - { name: async-chunks, use: ${PROBE_PLUGIN}, options: { chunks: true, async: true } }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - { name: sync, match: { path_prefix: /sync/ }, pool: gpu, plugins: [sync-chunks] }
  - { name: async, match: { path_prefix: /async/ }, pool: gpu, plugins: [async-chunks] }
`;
}

/**
 * Streams to a client that reads nothing; returns the bytes the node wrote once it stalled. With
 * `thenRead`, the client then reads and the whole stream must arrive (only the drain resumes it).
 */
async function stalledAt(node: FloodNode, url: string, path: string, thenRead = false): Promise<number> {
  node.sent = 0;
  const client = slowClient(url, path);
  try {
    await waitFor(() => node.sent > 0, 5000, 'the node to start streaming');
    const at = await settled(() => node.sent, 500, 15_000);
    assert.ok(!node.finished, `${path}: the node finished a stream the client never read`);
    assert.ok(node.blocked, `${path}: the node waits for drain`);
    if (thenRead) {
      let received = 0;
      let tail = '';
      const ended = new Promise<void>((resolve, reject) => {
        client.on('data', (d: Buffer) => {
          received += d.length;
          tail = (tail + d.toString('latin1')).slice(-16);
          // The terminating zero-length chunk of the chunked response.
          if (tail.endsWith('\r\n0\r\n\r\n')) resolve();
        });
        client.once('close', () => reject(new Error(`closed after ${received} bytes`)));
        setTimeout(() => reject(new Error(`stream stuck after ${received} bytes`)), 20_000).unref();
      });
      client.resume();
      await ended;
      assert.ok(node.finished, `${path}: the node finished once the client read`);
      assert.ok(received > TOTAL_BYTES, `${path}: the client got ${received} bytes of ${TOTAL_BYTES}`);
    }
    return at;
  } finally {
    client.destroy();
  }
}

for (const engine of ENGINES) {
  describe(`chunk hooks keep backpressure on the ${engine.name} engine`, { timeout: 90_000 }, () => {
    let node: FloodNode | undefined;
    let t: TestSluice | undefined;

    before(async () => {
      node = new FloodNode();
      await new Promise<void>((resolve) => node!.server.listen(0, '127.0.0.1', resolve));
      t = await startTestSluice(withListenerKeys(config(node.url), { pipelining: engine.pipelining }));
    });

    after(async () => {
      await t?.close();
      if (node === undefined) return;
      node.server.closeAllConnections();
      await new Promise<void>((resolve) => node!.server.close(() => resolve()));
    });

    it('stalls the node for a client that reads nothing with an async chunk hook as with a sync one, and resumes it on drain', async () => {
      const sync = await stalledAt(node!, t!.url, '/sync/v1/chat/completions');
      const async = await stalledAt(node!, t!.url, '/async/v1/chat/completions', true);
      assert.ok(
        async <= Math.max(2 * sync, sync + 4 * 1024 * 1024) && async <= TOTAL_BYTES / 4,
        `with an async chunk hook the node wrote ${async} bytes before it stalled, with a sync one ${sync}`,
      );
    });
  });
}
