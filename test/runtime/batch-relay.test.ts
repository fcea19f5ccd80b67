/**
 * The two sides of micro-batching under `server.workers` (proxy/runtime/batch-relay.ts), in one
 * thread against a real node: the main thread's side batches a relayed item in the current plan's
 * batcher or declines it when the plan has none, and a worker's request whose item is declined goes
 * to the node alone and is answered. (test/runtime/workers.test.ts runs the relay across threads.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  BatchRelayClient,
  RelayTarget,
  acceptRelayedItem,
  type RelayedItem,
  type RelayedResult,
} from '../../proxy/runtime/batch-relay.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { compilePlan } from '../../proxy/plan/plan.js';

const BATCHING = '    batching: { mode: native, max_batch_size: 8, max_wait_ms: 5 }';

function item(id: number, input: string, route = 'all', path = '/v1/embeddings'): RelayedItem {
  return {
    t: 'batch-item',
    id,
    route,
    pool: 'gpu',
    path,
    body: Buffer.from(JSON.stringify({ model: 'e', input })),
  };
}

function relayed(t: TestSluice, m: RelayedItem): Promise<RelayedResult> {
  return new Promise((resolve) => t.sluice.acceptBatchItem(m, resolve));
}

describe('the batch relay', { timeout: 30_000 }, () => {
  /** Inputs of each call the node received. */
  const calls: unknown[] = [];
  let node: ScriptedNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      let text = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (text += c));
      req.on('end', () => {
        const input = (JSON.parse(text) as { input: string | string[] }).input;
        calls.push(input);
        const inputs = Array.isArray(input) ? input : [input];
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            object: 'list',
            model: 'e',
            data: inputs.map((s, index) => ({ object: 'embedding', index, embedding: [s.length] })),
            usage: { prompt_tokens: inputs.length, total_tokens: inputs.length },
          }),
        );
      });
    });
    t = await startTestSluice(
      basicConfig([node.url], '', { route: BATCHING }).replace(
        '    match: {}',
        '    match: { path: /v1/embeddings }',
      ),
    );
  });
  after(async () => {
    await t?.close();
    await node?.close();
  });

  it("batches a relayed item in the main thread's batcher and answers it once, with its window", async () => {
    const r = await relayed(t!, item(7, 'abcd'));
    assert.equal(r.id, 7);
    assert.equal(r.status, 200);
    assert.equal(r.size, 1);
    assert.ok(r.waitMs >= 0);
    assert.deepEqual((JSON.parse(Buffer.from(r.body).toString()) as { data: unknown }).data, [
      { object: 'embedding', index: 0, embedding: [4] },
    ]);
    const metrics = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_batch_items_total\{route="all"\} 1\n/);
  });

  it('declines an item of a route, pool or path the plan does not batch, and a body it cannot', async () => {
    for (const m of [
      item(1, 'x', 'gone'),
      { ...item(2, 'x'), pool: 'other' },
      { ...item(3, 'x'), body: Buffer.from('[1, 2]') },
      { ...item(4, 'x'), body: Buffer.from('{"input": ') },
    ]) {
      const r = await relayed(t!, m);
      assert.equal(r.status, 0, `item ${m.id}`);
      assert.equal(r.id, m.id);
    }
  });

  it('sends a request alone when the main thread declines its item, and answers it', async () => {
    // A worker's view: this thread's batcher relays its items to a "main thread" whose plan has
    // no batching (a reload removed it there first), through the real client and the real decline.
    const config = { ...t!.sluice.current.config };
    config.routes = config.routes.map((r) => ({ ...r, batching: undefined }));
    const noBatching = compilePlan(99, config, 'test', {
      registry: t!.sluice.registry,
      stats: t!.sluice.stats,
      runtime: t!.sluice.runtime,
      log: t!.sluice.log,
    });
    const declined: RelayedItem[] = [];
    const client = new BatchRelayClient((m) => {
      declined.push(m);
      acceptRelayedItem(noBatching, m, (r) => setImmediate(() => client.done(r)));
    });
    const batcher = t!.sluice.current.routes.routes[0]!.batchers![0]!.batcher;
    batcher.relay = new RelayTarget(client, 'all', 'gpu', '/v1/embeddings');
    try {
      calls.length = 0;
      const r = await fetch(`${t!.url}/v1/embeddings`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'e', input: 'hello' }),
      });
      assert.equal(r.status, 200);
      const answer = (await r.json()) as { data: { embedding: number[] }[] };
      assert.deepEqual(answer.data[0]!.embedding, [5]);
      assert.equal(declined.length, 1);
      assert.equal(Buffer.from(declined[0]!.body).toString(), JSON.stringify({ model: 'e', input: 'hello' }));
      // Sent as the client sent it (a string input), not as a batch of one.
      assert.deepEqual(calls, ['hello']);
      assert.equal(client.pending, 0);
    } finally {
      batcher.relay = null;
    }
  });
});
