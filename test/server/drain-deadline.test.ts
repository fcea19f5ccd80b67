/**
 * A drain that reaches its deadline ends the requests still running as Sluice ends any request it
 * gives up on, instead of cutting their connections: a request still waiting for its node gets a
 * 503 `server_shutting_down`, a stream gets an SSE error event after the events it had; the drain
 * reports how many it ended. Per engine, against simulated nodes over HTTP.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { startSimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { basicConfig, startTestSluice, waitFor } from '../helpers/sluice.js';

function chat(stream: boolean, headers: Record<string, string>): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 50, stream }),
  };
}

describe('the drain deadline', { timeout: 60_000 }, () => {
  for (const engine of ENGINES) {
    it(`${engine.name} listener: ends what is left with a 503 or an error event, and counts it`, async () => {
      const fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      const t = await startTestSluice(
        withListenerKeys(basicConfig([fleet.urls[0]!]), { pipelining: engine.pipelining }),
      );
      try {
        const stream = await fetch(
          `${t.url}/v1/chat/completions`,
          chat(true, { 'x-sim-chunk-delay-ms': '200' }),
        );
        assert.equal(stream.status, 200);
        const reader = stream.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>;
        const first = new TextDecoder().decode((await reader.read()).value);
        assert.match(first, /^data: /);
        const waiting = fetch(`${t.url}/v1/chat/completions`, chat(false, { 'x-sim-stall-ms': '3000' }));
        await new Promise((r) => setTimeout(r, 100));
        const started = performance.now();
        const cut = await t.sluice.drain(500);
        assert.equal(cut, 2);
        assert.ok(performance.now() - started < 2000, 'the drain kept to its deadline');
        const w = await waiting;
        assert.equal(w.status, 503);
        assert.equal(((await w.json()) as { error: { code: string } }).error.code, 'server_shutting_down');
        let rest = '';
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          rest += new TextDecoder().decode(r.value);
        }
        assert.match(rest, /\n\ndata: \{"error":.*"server_shutting_down"/);
      } finally {
        await t.close();
        await fleet.close();
      }
    });
  }

  it('stops a synchronous batch at the deadline: its items not started yet never reach a node', async () => {
    let seen = 0;
    const node = createServer((req, res) => {
      seen++;
      req.resume();
      // Every item takes 2 s: the drain's deadline comes during the first.
      const timer = setTimeout(
        () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'),
        2000,
      );
      res.on('close', () => clearTimeout(timer));
    });
    await new Promise<void>((r) => node.listen(0, '127.0.0.1', r));
    const addr = node.address();
    const url = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
    const t = await startTestSluice(
      basicConfig([url], 'batch_api:\n  sync: { max_items: 10, concurrency: 1 }\n'),
    );
    try {
      const items = Array.from({ length: 4 }, (_, i) => ({
        custom_id: `c-${i}`,
        model: 'm',
        input: `x ${i}`,
      }));
      const batch = fetch(`${t.url}/v1/batch`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ endpoint: '/v1/embeddings', items }),
      });
      await waitFor(() => seen === 1, 3000, 'the first item at the node');
      const cut = await t.sluice.drain(300);
      assert.equal(cut, 2, 'the batch request and its running item');
      const res = await batch;
      assert.equal(res.status, 503);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(seen, 1, 'an item started after the deadline');
    } finally {
      await t.close();
      node.closeAllConnections();
      await new Promise<void>((r) => node.close(() => r()));
    }
  });
});
