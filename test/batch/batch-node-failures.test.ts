/**
 * Micro-batch calls against broken nodes: a call whose node keeps sending is ended by the route's
 * `total_ms` (the node's in-flight count goes back to 0 and nothing of the answer is kept), and a
 * node that fails batch calls is ejected by passive outlier detection as it is for other routes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { startRecordingNode, startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, findNode, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

function embed(t: TestSluice, input: string): Promise<Response> {
  return fetch(`${t.url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-embed', input }),
  });
}

describe('micro-batch calls to broken nodes', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let trickler: ScriptedNode | undefined;
  let failing: ScriptedNode | undefined;
  let failingCalls = 0;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    // Answers 200 at once, then a space every 50 ms, never ending.
    trickler = await startScriptedNode((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data":[');
      const timer = setInterval(() => res.write(' '), 50);
      res.on('close', () => clearInterval(timer));
    });
    failing = await startScriptedNode((req, res) => {
      req.resume();
      failingCalls++;
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"broken","type":"server_error"}}');
    });
  });

  after(async () => {
    await t?.close();
    await trickler?.close();
    await failing?.close();
    await fleet?.close();
  });

  it('ends a batch call at total_ms and gives the node back', async () => {
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: slow
    timeouts: { ttfb_ms: 1000, idle_ms: 1000, total_ms: 400 }
    nodes:
      - url: ${trickler!.url}
routes:
  - name: batched
    match: { path: /v1/embeddings }
    pool: slow
    batching: { mode: native, max_attempts: 1 }
`);
    const started = performance.now();
    const r = await embed(t, 'never answered');
    const ms = performance.now() - started;
    assert.equal(r.status, 504, await r.text());
    assert.ok(ms < 2000, `answered after ${ms.toFixed(0)} ms`);
    // The call itself was aborted: the node counts nothing in flight, though it would send forever.
    await waitFor(() => findNode(t!, trickler!.url)?.inFlight === 0, 2000, 'the call to be aborted');
    await t.close();
    t = undefined;
  });

  it('ejects a node that fails batch calls, as on routes without batching', async () => {
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: embed
    health: { outlier: { consecutive_failures: 3 } }
    nodes:
      - url: ${failing!.url}
      - url: ${fleet!.urls[0]!}
routes:
  - name: batched
    match: { path: /v1/embeddings }
    pool: embed
    batching: { mode: native, max_attempts: 4 }
`);
    for (let i = 0; i < 30; i++) {
      const r = await embed(t, `text ${i}`);
      const text = await r.text();
      assert.equal(r.status, 200, text);
    }
    assert.ok(failingCalls <= 4, `the failing node got ${failingCalls} of 30 calls`);
    const nodes = (await (await fetch(`${t.adminUrl}/admin/nodes`)).json()) as {
      nodes: { id: string; available: boolean }[];
    }[];
    const bad = nodes[0]!.nodes.find((n) => n.id === failing!.url)!;
    assert.equal(bad.available, false, 'the failing node is ejected');
  });

  it("spends the pool's retry budget on batch retries, and counts them as the pool's retries", async () => {
    await t?.close();
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: embed
    health: { outlier: { consecutive_failures: 0 } }
    retry_budget: { percent: 10, min_per_second: 1 }
    nodes:
      - url: ${failing!.url}
routes:
  - name: batched
    match: { path: /v1/embeddings }
    pool: embed
    batching: { mode: native, max_attempts: 4, max_wait_ms: 1 }
`);
    const before = failingCalls;
    for (let i = 0; i < 40; i++) {
      const r = await embed(t, `budget ${i}`);
      assert.equal(r.status, 500);
      await r.arrayBuffer();
    }
    const calls = failingCalls - before;
    // 40 first calls; retries within 10 % of them plus the reserve (about 1 a second, a few
    // seconds at most): far below the 160 that four attempts each would make.
    assert.ok(calls < 40 + 4 + 10, `${calls} node calls for 40 requests`);
    const nodes = (await (await fetch(`${t.adminUrl}/admin/nodes`)).json()) as {
      retries: number;
      retry_budget_refused: number;
    }[];
    assert.equal(nodes[0]!.retries, calls - 40, 'every batch retry is a pool retry');
    assert.ok(nodes[0]!.retry_budget_refused > 0);
  });
});

describe('bodies a native batch cannot combine', { timeout: 30_000 }, () => {
  it('forwards them alone, as the client sent them, for the node to answer', async () => {
    const node = await startRecordingNode(
      400,
      '{"error":{"message":"bad input","type":"invalid_request_error","code":null}}',
    );
    const received = node.received;
    const t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: embed
    nodes:
      - url: ${node.url}
routes:
  - name: batched
    match: { path: /v1/embeddings }
    pool: embed
    batching: { mode: native }
`).catch(async (e: unknown) => {
      await node.close();
      throw e;
    });
    try {
      const bodies = [
        '{"model":"e","input":[]}',
        '{"model":"e"}',
        '{"model":"e","input":[1,"a"]}',
        '{"model":"e","input":""}',
      ];
      for (const body of bodies) {
        const r = await fetch(`${t.url}/v1/embeddings`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        });
        assert.equal(r.status, 400);
        assert.match(await r.text(), /bad input/);
      }
      assert.deepEqual(received, bodies);
    } finally {
      await t.close();
      await node.close();
    }
  });
});
