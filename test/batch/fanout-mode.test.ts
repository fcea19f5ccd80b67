/**
 * Fanout mode against a real simulated node: a micro-batch becomes concurrent single-item calls
 * under the per-node limit, answers pass through, and a failing item is retried alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { jsonItemCodec } from '../../proxy/batch/batch-codec.js';
import { createMicroBatcher, type MicroBatcher } from '../../proxy/batch/micro-batcher.js';
import type { MicroBatchOptions } from '../../proxy/batch/batch-options.js';
import type { BatchTransport } from '../../proxy/batch/batch-transport.js';
import { DIM, SimTransport, embed, onlyEmbedding } from './sim-transport.js';

let fleet: SimFleet;
before(async () => {
  fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
});
after(() => fleet?.close());

function fanout(
  upstream: MicroBatchOptions['upstream'],
  opts: Partial<MicroBatchOptions> = {},
): MicroBatcher {
  return createMicroBatcher({
    mode: 'fanout',
    codec: jsonItemCodec,
    upstream,
    retryBaseMs: 1,
    maxBatchSize: 64,
    maxWaitMs: 5,
    ...opts,
  });
}

describe('fanout batching', () => {
  it('sends a micro-batch as single calls, never more than maxConcurrentPerNode at once', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    t.extraHeaders = { 'x-sim-stall-ms': '10' };
    const b = fanout(t, { maxConcurrentPerNode: 4 });
    const texts = Array.from({ length: 24 }, (_, i) => `fan ${i}`);
    const results = await Promise.all(texts.map((x) => b.run(embed(x))));
    assert.equal(t.calls, 24);
    assert.ok(t.itemsPerCall.every((n) => n === 1));
    assert.equal(t.maxRunning, 4);
    results.forEach((r, i) => {
      assert.equal(r.status, 200);
      assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding(texts[i] ?? '', DIM));
    });
    await b.close();
  });

  it('assigns each micro-batch to one node picked once', async () => {
    const nodes = [new SimTransport(fleet.urls[0] ?? ''), new SimTransport(fleet.urls[1] ?? '')];
    let next = 0;
    const picker = { pick: (): BatchTransport => nodes[next++ % 2] as BatchTransport };
    const b = fanout(picker, { maxBatchSize: 5, maxWaitMs: 10_000 });
    await Promise.all(Array.from({ length: 10 }, (_, i) => b.run(embed(`pick ${i}`))));
    assert.deepEqual(
      nodes.map((n) => n.calls),
      [5, 5],
    );
    assert.deepEqual(nodes[0]?.inputsSent, ['pick 0', 'pick 1', 'pick 2', 'pick 3', 'pick 4']);
    await b.close();
  });

  it('fails only the item whose call fails, and retries only that item', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    t.failures.set('bad', Infinity);
    t.failures.set('flaky', 1);
    const b = fanout(t, { maxAttempts: 3 });
    const texts = ['a', 'bad', 'b', 'flaky', 'c'];
    const results = await b.runAll(texts.map((x) => embed(x)));
    assert.deepEqual(
      results.map((r) => [r.status, r.attempts]),
      [
        [200, 1],
        [500, 3],
        [200, 1],
        [200, 2],
        [200, 1],
      ],
    );
    assert.equal(t.calls, 5 + 2 + 1);
    assert.deepEqual(
      onlyEmbedding(results[3]?.body ?? Buffer.alloc(0)).embedding,
      expectedEmbedding('flaky', DIM),
    );
    await b.close();
  });

  it('shares one call among identical items', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = fanout(t, { maxWaitMs: 10 });
    const results = await Promise.all(Array.from({ length: 8 }, () => b.run(embed('dup'))));
    assert.equal(t.calls, 1);
    for (const r of results) assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding('dup', DIM));
    await b.close();
  });
});
