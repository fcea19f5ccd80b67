/**
 * The coalescing window against a real simulated node: size- and time-triggered closes, preferred
 * sizes, idle pass-through without waiting, de-duplication of identical items, and a close() that
 * drains and leaves no timer behind.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { nowMs } from '../../proxy/lifecycle/clock.js';
import { openAiEmbeddingsCodec } from '../../proxy/batch/embeddings-codec.js';
import { createMicroBatcher, type MicroBatcher } from '../../proxy/batch/micro-batcher.js';
import type { MicroBatchOptions } from '../../proxy/batch/batch-options.js';
import { DIM, SimTransport, activeTimers, embed, onlyEmbedding, waitFor } from './sim-transport.js';

let fleet: SimFleet;
before(async () => {
  fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
});
after(() => fleet?.close());

function native(t: SimTransport, opts: Partial<MicroBatchOptions> = {}): MicroBatcher {
  return createMicroBatcher({ mode: 'native', codec: openAiEmbeddingsCodec, upstream: t, ...opts });
}

function url(): string {
  return fleet.urls[0] ?? '';
}

describe('micro-batch window', () => {
  it('closes as soon as it holds maxBatchSize items, long before its deadline', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 8, maxWaitMs: 10_000 });
    const start = nowMs();
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => b.run(embed(`size ${i}`))));
    assert.ok(nowMs() - start < 1000);
    assert.deepEqual(t.itemsPerCall, [8]);
    assert.equal(b.stats.sizeCloses, 1);
    for (const r of results) assert.equal(r.status, 200);
    await b.close();
  });

  it('closes at maxWaitMs when fewer items arrive', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 100, maxWaitMs: 30 });
    const start = nowMs();
    const results = await Promise.all([b.run(embed('t1')), b.run(embed('t2')), b.run(embed('t3'))]);
    const waited = (t.sentAtMs[0] ?? 0) - start;
    assert.ok(waited >= 29, `dispatched after ${waited} ms, expected about 30`);
    assert.ok(waited < 500, `dispatched after ${waited} ms, expected about 30`);
    assert.deepEqual(t.itemsPerCall, [3]);
    assert.equal(b.stats.timeCloses, 1);
    assert.deepEqual(
      results.map((r) => r.status),
      [200, 200, 200],
    );
    await b.close();
  });

  it('cuts a window closed by its deadline into preferred sizes', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 16, maxWaitMs: 20, preferredSizes: [8, 4] });
    const texts = Array.from({ length: 13 }, (_, i) => `pref ${i}`);
    const results = await Promise.all(texts.map((x) => b.run(embed(x))));
    assert.deepEqual(t.itemsPerCall, [8, 4, 1]);
    results.forEach((r, i) =>
      assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding(texts[i] ?? '', DIM)),
    );
    await b.close();
  });

  it('dispatches at once, within a millisecond, when the pool is idle', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 50, idle: () => true });
    const delays: number[] = [];
    for (let i = 0; i < 20; i++) {
      const start = nowMs();
      const done = b.run(embed(`idle ${i}`));
      delays.push((t.sentAtMs[i] ?? Infinity) - start);
      assert.equal((await done).status, 200);
    }
    delays.sort((a, b2) => a - b2);
    assert.ok((delays[18] ?? Infinity) < 1, `p95 dispatch delay ${delays[18]} ms`);
    assert.equal(b.stats.idlePassThrough, 20);
    await b.close();
  });

  it('opens the window only while the caller says the pool is busy (poolIdle field)', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 10_000 });
    b.poolIdle = false;
    const waiting = [b.run(embed('busy 1')), b.run(embed('busy 2'))];
    assert.equal(t.calls, 0);
    assert.equal(b.openWindows, 1);
    b.poolIdle = true;
    const third = b.run(embed('busy 3'));
    assert.deepEqual(t.itemsPerCall, [3], 'the idle signal flushes the open window with the new item');
    const all = await Promise.all([...waiting, third]);
    assert.deepEqual(
      all.map((r) => r.status),
      [200, 200, 200],
    );
    await b.close();
  });

  it('computes identical items once and gives every caller the shared result', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 10 });
    const bodies = [
      ...Array.from({ length: 10 }, () => embed('same text')),
      embed('other a'),
      embed('other b'),
    ];
    const results = await Promise.all(bodies.map((x) => b.run(x)));
    assert.deepEqual(t.inputsSent, ['same text', 'other a', 'other b']);
    assert.equal(b.stats.deduplicated, 9);
    for (let i = 0; i < 10; i++) {
      const r = results[i];
      assert.equal(r?.status, 200);
      assert.deepEqual(onlyEmbedding(r.body).embedding, expectedEmbedding('same text', DIM));
    }
    assert.deepEqual(
      onlyEmbedding(results[11]?.body ?? Buffer.alloc(0)).embedding,
      expectedEmbedding('other b', DIM),
    );
    await b.close();
  });

  it('never combines items of different groups (model parameters) into one call', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 10 });
    const [a, c] = await Promise.all([
      b.run(embed('g', { dimensions: 8 })),
      b.run(embed('g', { dimensions: 16 })),
    ]);
    assert.equal(t.calls, 2);
    assert.deepEqual(onlyEmbedding(a?.body ?? Buffer.alloc(0)).embedding, expectedEmbedding('g', 8));
    assert.deepEqual(onlyEmbedding(c?.body ?? Buffer.alloc(0)).embedding, expectedEmbedding('g', 16));
    await b.close();
  });

  it('shortens the window when observed batch latency nears the route objective', async () => {
    const t = new SimTransport(url());
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 40, targetLatencyMs: 30 });
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      const start = nowMs();
      await b.run(embed(`slo ${i}`));
      waits.push((t.sentAtMs[i] ?? 0) - start);
    }
    assert.ok(b.controller.waitMs < 40, `window ${b.controller.waitMs} ms`);
    assert.ok((waits[3] ?? 0) < (waits[0] ?? 0), `waits ${waits.join(', ')} ms`);
    await b.close();
  });

  it('close() dispatches open windows, ends retry backoffs and leaves no timer running', async () => {
    const before = activeTimers();
    const t = new SimTransport(url());
    t.failures.set('keeps failing', Infinity);
    const b = native(t, { maxBatchSize: 64, maxWaitMs: 60_000, retryBaseMs: 60_000, retryMaxMs: 60_000 });
    b.poolIdle = true;
    const failing = b.run(embed('keeps failing'));
    await waitFor(() => b.dispatcher.retriesWaiting === 1);
    b.poolIdle = false;
    const windowed = b.run(embed('in the window'));
    assert.equal(b.openWindows, 1);
    assert.ok(activeTimers() >= before + 2);
    await b.close();
    assert.equal(activeTimers(), before);
    assert.equal((await windowed).status, 200);
    const f = await failing;
    assert.equal(f.status, 500);
    assert.equal(f.attempts, 1);
    const late = await b.run(embed('after close'));
    assert.equal(late.status, 503);
    assert.equal(b.pending, 0);
  });
});
