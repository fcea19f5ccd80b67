/**
 * A batching route's pools, timeouts and path, end to end with real simulated nodes: batched
 * requests follow the route's split and fall back to its fallback pools as unbatched ones do, batch
 * calls keep the route's own timeouts, and a batching route must name the one path its calls go to.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startRefused, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const BATCHING = 'batching: { mode: native, max_batch_size: 8, max_wait_ms: 10 }';

async function embed(t: TestSluice, text: string): Promise<Response> {
  return fetch(`${t.url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-embed', input: text }),
    signal: AbortSignal.timeout(5_000),
  });
}

describe('micro-batching: the route’s pools, timeouts and path', { timeout: 60_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let slow: Server | null = null;

  /** Closes the previous test's Sluice (also when its test failed) and starts one on `yaml`. */
  async function restart(yaml: string): Promise<TestSluice> {
    const previous = t;
    t = null;
    await previous?.close();
    return startTestSluice(yaml);
  }

  /** Pools `a` and `b` (the fleet's two nodes) and a batching embeddings route sent by `targets`. */
  function twoPools(targets: string): string {
    const [a, b] = fleet!.urls;
    return `${LOOPBACK_HEAD}pools:
  - { name: a, nodes: [{ url: ${a} }] }
  - { name: b, nodes: [{ url: ${b} }] }
routes:
  - name: embeddings
    match: { path: /v1/embeddings, methods: [POST] }
    ${targets}
    ${BATCHING}
`;
  }

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
  });

  after(async () => {
    await t?.close().catch(() => undefined);
    await fleet?.close();
    slow?.closeAllConnections();
    await new Promise<void>((resolve) => (slow === null ? resolve() : slow.close(() => resolve())));
  });

  it('spreads batched requests over the pools of its split, as unbatched ones', async () => {
    t = await restart(twoPools('split: [{ pool: a, weight: 50 }, { pool: b, weight: 50 }]'));
    const served = fleet!.nodes.map((n) => n.stats().served);
    for (let i = 0; i < 40; i++) assert.equal((await embed(t, `text ${i}`)).status, 200);
    const calls = fleet!.nodes.map((n, i) => n.stats().served - served[i]!);
    // 40 requests one after another at 50/50: both pools get calls (all on one: p = 2^-39).
    assert.ok(calls[0]! > 0 && calls[1]! > 0, `calls per pool ${calls.join(', ')}`);
  });

  it('falls back to the route’s fallback pool when its pool has no eligible node', async () => {
    t = await restart(twoPools('pool: a\n    fallback: [b]'));
    const drained = await fetch(`${t.adminUrl}/admin/nodes/a/0/drain`, { method: 'POST' });
    assert.equal(drained.status, 200);
    const served = fleet!.nodes.map((n) => n.stats().served);
    const answers = await Promise.all([1, 2, 3, 4].map((i) => embed(t!, `fallback ${i}`)));
    for (const r of answers) assert.equal(r.status, 200, await r.text());
    assert.equal(fleet!.nodes[0]!.stats().served - served[0]!, 0, 'the drained pool got a call');
    assert.ok(fleet!.nodes[1]!.stats().served - served[1]! > 0, 'the fallback pool got no call');
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_pool_fallback_total\{pool="b"\} [1-9]/);
  });

  it('ends a batch call at the route’s ttfb_ms, not only the pool’s', async () => {
    slow = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const timer = setTimeout(() => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0] }] }),
          );
        }, 1_500);
        res.on('close', () => clearTimeout(timer));
      });
    });
    await new Promise<void>((resolve) => slow!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(slow.address() as AddressInfo).port}`;
    t = await restart(`${LOOPBACK_HEAD}pools:
  - { name: slow, nodes: [{ url: ${url} }] }
routes:
  - name: embeddings
    match: { path: /v1/embeddings, methods: [POST] }
    pool: slow
    timeouts: { ttfb_ms: 300 }
    ${BATCHING.replace('}', ', max_attempts: 1 }')}
`);
    const started = Date.now();
    const r = await embed(t, 'slow');
    const took = Date.now() - started;
    assert.equal(r.status, 504, await r.text());
    assert.ok(took < 1_200, `answered after ${took} ms: the node's 1.5 s, not the route's 300 ms`);
  });

  it('refuses a batching route without an exact path or upstream_path, and sends GET past the batcher', async () => {
    const err = await startRefused(`${LOOPBACK_HEAD}pools:
  - { name: gpu, nodes: [{ url: ${fleet!.urls[0]} }] }
routes:
  - name: all
    match: { path_prefix: /v1/ }
    pool: gpu
    ${BATCHING}
`);
    assert.match(err.message, /routes\[0\]\.batching|routes\.0\.batching/);
    assert.match(err.message, /needs match\.path \(an exact path\) or batching\.upstream_path/);
    t = await restart(`${LOOPBACK_HEAD}pools:
  - { name: gpu, nodes: [{ url: ${fleet!.urls[0]} }] }
routes:
  - name: all
    match: { path_prefix: /v1/ }
    pool: gpu
    batching: { mode: fanout, upstream_path: /v1/embeddings, max_wait_ms: 10 }
`);
    const models = await fetch(`${t.url}/v1/models`, { signal: AbortSignal.timeout(5_000) });
    assert.equal(models.status, 200, await models.clone().text());
    assert.equal(((await models.json()) as { object: string }).object, 'list');
    // Under the prefix, a POST to another path than upstream_path goes alone to its own path.
    const chat = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      signal: AbortSignal.timeout(5_000),
    });
    assert.equal(chat.status, 200, await chat.clone().text());
    assert.equal(((await chat.json()) as { object: string }).object, 'chat.completion');
    // ... while one to upstream_path is batched.
    const e = await embed(t, 'batched under the prefix');
    assert.equal(e.status, 200);
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_batch_items_total\{route="all"\} 1\b/);
  });
});
