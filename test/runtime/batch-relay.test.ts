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
import { startEmbeddingNode, type EmbeddingNode } from '../helpers/scripted-node.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { compilePlan } from '../../proxy/plan/plan.js';
import { ResultCollector } from '../../proxy/batch/result-collector.js';

const BATCHING = '    batching: { mode: native, max_batch_size: 8, max_wait_ms: 5 }';

function item(id: number, input: string, route = 'all', path = '/v1/embeddings'): RelayedItem {
  return {
    t: 'batch-item',
    id,
    routeAt: 0,
    batcherAt: 0,
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
  let node: EmbeddingNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    node = await startEmbeddingNode((s) => [s.length]);
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

  it('declines an item of a route, pool or position the plan does not batch, and a body it cannot', async () => {
    for (const m of [
      item(1, 'x', 'gone'),
      { ...item(2, 'x'), pool: 'other' },
      { ...item(5, 'x'), routeAt: 3 },
      { ...item(6, 'x'), batcherAt: 1 },
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
    batcher.relay = new RelayTarget(client, 0, 0, 'all', 'gpu', '/v1/embeddings');
    try {
      const before = node!.calls.length;
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
      assert.deepEqual(node!.calls.slice(before), ['hello']);
      assert.equal(client.pending, 0);
    } finally {
      batcher.relay = null;
    }
  });

  it('answers a declined item with a 503 to a sink that cannot send it alone', async () => {
    const sent: RelayedItem[] = [];
    const client = new BatchRelayClient((m) => sent.push(m));
    const sink = new ResultCollector(1);
    client.submit(new RelayTarget(client, 0, 0, 'all', 'gpu', '/v1/embeddings'), Buffer.from('{}'), sink, 0);
    client.done({
      t: 'batch-done',
      id: sent[0]!.id,
      status: 0,
      body: new Uint8Array(0),
      attempts: 0,
      waitMs: 0,
      size: 0,
    });
    const [r] = await sink.done;
    assert.equal(r!.status, 503);
    assert.equal(client.pending, 0);
  });
});
