/**
 * Native mode against a real simulated node: one embeddings call carries the window and each caller
 * gets its own vector (checked against the simulator's deterministic outputs) with index 0 and its
 * share of usage; failures stay with the item at fault; a multi-item caller gets input order.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { estimateTokens, expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { openAiEmbeddingsCodec } from '../../proxy/batch/embeddings-codec.js';
import { createMicroBatcher, type MicroBatcher } from '../../proxy/batch/micro-batcher.js';
import type { MicroBatchOptions } from '../../proxy/batch/batch-options.js';
import { DIM, SimTransport, embed, json, onlyEmbedding } from './sim-transport.js';

let fleet: SimFleet;
before(async () => {
  fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
});
after(() => fleet?.close());

function native(t: SimTransport, opts: Partial<MicroBatchOptions> = {}): MicroBatcher {
  return createMicroBatcher({
    mode: 'native',
    codec: openAiEmbeddingsCodec,
    upstream: t,
    retryBaseMs: 1,
    maxBatchSize: 64,
    maxWaitMs: 10,
    ...opts,
  });
}

describe('native batching', () => {
  it('splits one combined call back to 50 concurrent callers, each with its own embedding at index 0', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = native(t);
    const texts = Array.from({ length: 50 }, (_, i) => `caller ${i} ${'x'.repeat(i * 7)}`);
    const results = await Promise.all(texts.map((x) => b.run(embed(x))));
    assert.deepEqual(t.itemsPerCall, [50]);
    let prompt = 0;
    results.forEach((r, i) => {
      assert.equal(r.status, 200);
      const e = onlyEmbedding(r.body);
      assert.equal(e.count, 1);
      assert.equal(e.index, 0);
      assert.deepEqual(e.embedding, expectedEmbedding(texts[i] ?? '', DIM));
      const usage = json(r.body)['usage'] as { prompt_tokens: number; total_tokens: number };
      assert.equal(usage.total_tokens, usage.prompt_tokens);
      prompt += usage.prompt_tokens;
    });
    let expected = 0;
    for (const x of texts) expected += estimateTokens(x);
    assert.equal(prompt, expected, 'the shares add up to the node’s usage');
    await b.close();
  });

  it('keeps input order for a multi-item caller, across groups and with a failed item in the middle', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = native(t);
    const bodies = Array.from({ length: 20 }, (_, i) =>
      i === 9 ? embed('') : embed(`order ${i}`, i % 3 === 0 ? { dimensions: 8 } : {}),
    );
    const results = await b.runAll(bodies);
    assert.equal(results.length, 20);
    results.forEach((r, i) => {
      if (i === 9) {
        assert.equal(r.status, 400);
        return;
      }
      assert.equal(r.status, 200, `item ${i}`);
      assert.deepEqual(
        onlyEmbedding(r.body).embedding,
        expectedEmbedding(`order ${i}`, i % 3 === 0 ? 8 : DIM),
      );
    });
    await b.close();
  });

  it('never takes a string for the array its JSON spells, nor merges items whose other fields differ', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = native(t);
    const [asString, asArray, query, passage] = await Promise.all([
      b.run(embed('["abc","def"]')),
      b.run(embed(['abc', 'def'])),
      b.run(embed('same text', { input_type: 'query' })),
      b.run(embed('same text', { input_type: 'passage' })),
    ]);
    assert.equal(onlyEmbedding(asString.body).count, 1, 'one input, one embedding');
    assert.deepEqual(onlyEmbedding(asString.body).embedding, expectedEmbedding('["abc","def"]', DIM));
    const two = (json(asArray.body)['data'] as { embedding: number[] }[]).map((d) => d.embedding);
    assert.deepEqual(two, [expectedEmbedding('abc', DIM), expectedEmbedding('def', DIM)]);
    for (const r of [query, passage]) assert.equal(r.status, 200);
    // Different input_type: neither computed once for both nor sent in one call with the first's fields.
    assert.equal(t.inputsSent.filter((x) => x === 'same text').length, 2, 'each input_type sent its own');
    await b.close();
  });

  it("keys groups so that no field name can spell another body's fields", () => {
    const honest = { model: 'sim-embed', dimensions: 256, input: 'a' };
    const forged = { 'dimensions\u0000256\u0001model': 'sim-embed', input: 'b' };
    const spelled = { 'dimensions":256,"model': 'sim-embed', input: 'c' };
    const keys = [honest, forged, spelled].map((b) => openAiEmbeddingsCodec.groupKey(b));
    assert.equal(new Set(keys).size, 3, keys.join(' | '));
    assert.equal(
      openAiEmbeddingsCodec.groupKey({ dimensions: 256, model: 'sim-embed', input: 'z' }),
      keys[0],
      'the same fields in another order share a group',
    );
  });

  it('gives a multi-input item its own slice with indexes from 0', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = native(t);
    const [one, many] = await Promise.all([b.run(embed('solo')), b.run(embed(['m0', 'm1', 'm2']))]);
    assert.deepEqual(t.itemsPerCall, [2]);
    assert.equal(onlyEmbedding(one?.body ?? Buffer.alloc(0)).count, 1);
    const data = json(many?.body ?? Buffer.alloc(0))['data'] as { index: number; embedding: number[] }[];
    assert.deepEqual(
      data.map((d) => d.index),
      [0, 1, 2],
    );
    data.forEach((d, j) => assert.deepEqual(d.embedding, expectedEmbedding(`m${j}`, DIM)));
    await b.close();
  });

  it('isolates a 4xx item: the combined call falls back to single calls and only that item fails', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    const b = native(t);
    const bodies = Array.from({ length: 10 }, (_, i) => embed(i === 4 ? '' : `iso ${i}`));
    const results = await Promise.all(bodies.map((x) => b.run(x)));
    assert.equal(b.stats.fallbacks, 1);
    results.forEach((r, i) => {
      if (i === 4) {
        assert.equal(r.status, 400);
        assert.equal(typeof (json(r.body)['error'] as { message: unknown }).message, 'string');
        assert.equal(r.attempts, 1);
      } else {
        assert.equal(r.status, 200);
        assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding(`iso ${i}`, DIM));
      }
    });
    await b.close();
  });

  it('isolates a 5xx item: its neighbours are retried alone and succeed, it fails after maxAttempts', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    t.failures.set('poison', Infinity);
    const b = native(t, { maxAttempts: 3 });
    const texts = ['ok 0', 'ok 1', 'poison', 'ok 3'];
    const results = await Promise.all(texts.map((x) => b.run(embed(x))));
    results.forEach((r, i) => {
      if (texts[i] === 'poison') {
        assert.equal(r.status, 500);
        assert.equal(r.attempts, 3);
        assert.ok(json(r.body)['error']);
      } else {
        assert.equal(r.status, 200);
        assert.equal(r.attempts, 2);
        assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding(texts[i] ?? '', DIM));
      }
    });
    await b.close();
  });

  it('retries a failed item with backoff until it succeeds', async () => {
    const t = new SimTransport(fleet.urls[0] ?? '');
    t.failures.set('flaky', 2);
    const b = native(t, { maxAttempts: 4, retryBaseMs: 5 });
    b.poolIdle = true;
    const r = await b.run(embed('flaky'));
    assert.equal(r.status, 200);
    assert.equal(r.attempts, 3);
    assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding('flaky', DIM));
    const gap1 = (t.sentAtMs[1] ?? 0) - (t.sentAtMs[0] ?? 0);
    const gap2 = (t.sentAtMs[2] ?? 0) - (t.sentAtMs[1] ?? 0);
    assert.ok(gap1 >= 4.5 && gap2 >= 9.5, `backoff gaps ${gap1} ms, ${gap2} ms (expected ≥ 5, ≥ 10)`);
    await b.close();
  });

  it('answers an OpenAI-shaped 502 when the node cannot be reached', async () => {
    const t = new SimTransport('http://127.0.0.1:1');
    const b = native(t, { maxAttempts: 2 });
    b.poolIdle = true;
    const r = await b.run(embed('nobody home'));
    assert.equal(r.status, 502);
    assert.equal(r.attempts, 2);
    assert.equal((json(r.body)['error'] as { code: string }).code, 'upstream_connection_reset');
    await b.close();
  });
});
