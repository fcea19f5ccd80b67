/**
 * Fault injection on a simulated node: error rates and forced statuses, stalls, connection drops
 * mid-stream and before the head, crash and recovery, unhealthy, slow start, and the control API's
 * validation. Every degraded path a proxy must survive is reproducible here on demand.
 */

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { startSimFleet, type SimFleet } from '../../../loadtest/sim/fleet.js';
import { NO_FAULTS } from '../../../loadtest/sim/faults.js';
import type { SimNode } from '../../../loadtest/sim/sim-node.js';
import { chatBody, fastProfile, minOf, pollUntil, postJson, readSse } from './sim-test-helpers.js';

describe('fault injection', () => {
  let fleet: SimFleet;
  let url: string;
  let node: SimNode;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, profile: fastProfile() });
    url = fleet.urls[0] as string;
    node = fleet.nodes[0] as SimNode;
  });
  afterEach(() => {
    node.setFaults({ ...NO_FAULTS });
  });
  after(() => fleet?.close());

  const chat = (
    extra: Record<string, unknown> = {},
    headers: Record<string, string> = {},
  ): Promise<Response> => postJson(`${url}/v1/chat/completions`, chatBody('fault test', extra), headers);

  it('answers every request with error_status when error_rate is 1, and normally again at 0', async () => {
    const set = await postJson(`${url}/control/faults`, { error_rate: 1, error_status: 502 });
    assert.equal(set.status, 200);
    assert.equal(((await set.json()) as { error_rate: number }).error_rate, 1);
    for (let i = 0; i < 3; i++) {
      const res = await chat();
      assert.equal(res.status, 502);
      const body = (await res.json()) as { error: { message: string; type: string; code: string } };
      assert.equal(body.error.type, 'server_error');
      assert.equal(body.error.code, 'sim_injected_error');
    }
    const embed = await postJson(`${url}/v1/embeddings`, { model: 'e', input: 'x' });
    assert.equal(embed.status, 502);
    await postJson(`${url}/control/faults`, { error_rate: 0 });
    assert.equal((await chat()).status, 200);
    assert.ok(node.stats().injectedErrors >= 4);
  });

  it('answers the status and Retry-After given by x-sim-status headers', async () => {
    const res = await chat({}, { 'x-sim-status': '503', 'x-sim-retry-after': '7' });
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '7');
    const body = (await res.json()) as { error: { type: string } };
    assert.equal(body.error.type, 'service_unavailable');
    assert.equal((await chat({}, { 'x-sim-status': '429' })).status, 429);
    assert.equal((await chat({}, { 'x-sim-status': 'abc' })).status, 400);
  });

  it('destroys a stream after exactly x-sim-drop-after chunks and frees the slot', async () => {
    const res = await chat({ stream: true, max_tokens: 10 }, { 'x-sim-drop-after': '3' });
    assert.equal(res.status, 200);
    const sse = await readSse(res);
    assert.equal(sse.events.length, 3);
    assert.ok(!sse.events.includes('[DONE]'));
    assert.notEqual(sse.error, undefined, 'the stream must end with an error, not cleanly');
    await pollUntil('the dropped stream to release its slot', () => node.stats().running === 0);
  });

  it('drops streams after drop_after_chunks when drop_rate is 1', async () => {
    node.setFaults({ drop_rate: 1, drop_after_chunks: 2 });
    const sse = await readSse(await chat({ stream: true, max_tokens: 6 }));
    assert.equal(sse.events.length, 2);
    assert.notEqual(sse.error, undefined);
  });

  it('destroys the connection before the head for a plain request with x-sim-drop-after', async () => {
    await assert.rejects(chat({}, { 'x-sim-drop-after': '0' }));
    const before = node.stats().injectedDrops;
    node.setFaults({ drop_rate: 1 });
    await assert.rejects(postJson(`${url}/v1/embeddings`, { model: 'e', input: 'x' }));
    assert.equal(node.stats().injectedDrops, before + 1);
  });

  it('delays the response head by x-sim-stall-ms and by stall_ms', async () => {
    let start = performance.now();
    const res = await chat({ stream: true }, { 'x-sim-stall-ms': '150' });
    assert.ok(performance.now() - start >= 145, 'head arrived before the stall ended');
    await res.arrayBuffer();
    node.setFaults({ stall_ms: 120 });
    start = performance.now();
    await (await chat()).arrayBuffer();
    assert.ok(performance.now() - start >= 115);
  });

  it('paces stream chunks by x-sim-chunk-delay-ms', async () => {
    const start = performance.now();
    const sse = await readSse(
      await chat({ stream: true, max_tokens: 5 }, { 'x-sim-chunk-delay-ms': '30' }),
      start,
    );
    assert.equal(sse.events.length, 6);
    const t = sse.times;
    assert.ok((t[4] ?? 0) - (t[0] ?? 0) >= 4 * 30 - 5, `gaps: ${t.map((x) => x.toFixed(0)).join(' ')}`);
  });

  it('fails health and connections while crashed, cuts running streams, and recovers', async () => {
    const running = await chat({ stream: true, max_tokens: 1000 }, { 'x-sim-chunk-delay-ms': '20' });
    const cut = readSse(running);
    await pollUntil('the stream to be running', () => node.stats().running === 1);
    const set = await postJson(`${url}/control/faults`, { crash: true });
    assert.equal(((await set.json()) as { crash: boolean }).crash, true);
    const sse = await cut;
    assert.notEqual(sse.error, undefined, 'the running stream must be cut');
    assert.ok(!sse.events.includes('[DONE]'));
    await assert.rejects(fetch(`${url}/health`));
    await assert.rejects(chat());
    assert.equal(node.stats().running, 0);
    const state = (await (await fetch(`${url}/control/faults`)).json()) as { crash: boolean };
    assert.equal(state.crash, true);
    await postJson(`${url}/control/faults`, { crash: false });
    assert.equal((await fetch(`${url}/health`)).status, 200);
    assert.equal((await chat()).status, 200);
  });

  it('answers 503 on /health while unhealthy but keeps serving', async () => {
    node.setFaults({ unhealthy: true });
    assert.equal((await fetch(`${url}/health`)).status, 503);
    assert.equal((await chat()).status, 200);
  });

  it('runs slower by the slowdown factor and during a slow-start warm-up', async () => {
    const body = { max_tokens: 20 };
    const time = async (): Promise<number> => {
      const start = performance.now();
      await (await chat(body)).arrayBuffer();
      return performance.now() - start;
    };
    const base = await minOf(3, time);
    node.setFaults({ slowdown: 10 });
    const slowed = await time();
    assert.ok(
      slowed > base * 2 && slowed >= 80,
      `slowdown 10: ${slowed.toFixed(1)} ms vs ${base.toFixed(1)} ms`,
    );
    node.setFaults({ slowdown: 1, slow_start_ms: 2000, slow_start_factor: 10 });
    const warming = await time();
    assert.ok(
      warming > base * 2 && warming >= 70,
      `warm-up: ${warming.toFixed(1)} ms vs ${base.toFixed(1)} ms`,
    );
  });

  it('rejects invalid fault updates with 400 and keeps the state', async () => {
    for (const bad of [{ nope: 1 }, { error_rate: 2 }, { crash: 'yes' }, { error_status: 200 }, [1]]) {
      const res = await postJson(`${url}/control/faults`, bad);
      assert.equal(res.status, 400, JSON.stringify(bad));
    }
    const state = (await (await fetch(`${url}/control/faults`)).json()) as Record<string, unknown>;
    assert.deepEqual(state, { ...NO_FAULTS });
    assert.throws(() => node.setFaults({ slowdown: 0 }), /slowdown/);
  });
});
