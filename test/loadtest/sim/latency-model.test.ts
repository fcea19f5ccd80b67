/**
 * The latency model seen over HTTP: a cached prefix shortens time to first token, full slots make
 * requests queue, speed factors and embedding batch sizes change service time, and a client that
 * disconnects frees its slot.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startSimFleet } from '../../../loadtest/sim/fleet.js';
import {
  chatBody,
  fastProfile,
  minOf,
  pollUntil,
  postJson,
  readSse,
  scrapeMetric,
} from './sim-test-helpers.js';

/** Milliseconds until the first SSE event of a streamed chat request. */
async function ttft(url: string, content: string, extra: Record<string, unknown> = {}): Promise<number> {
  const start = performance.now();
  const res = await postJson(`${url}/v1/chat/completions`, chatBody(content, { stream: true, ...extra }));
  const sse = await readSse(res, start);
  assert.equal(sse.error, undefined);
  return sse.times[0] ?? Number.NaN;
}

async function timed(run: () => Promise<Response>): Promise<number> {
  const start = performance.now();
  const res = await run();
  await res.arrayBuffer();
  assert.equal(res.status, 200);
  return performance.now() - start;
}

describe('latency model', () => {
  it('serves a repeated long prompt faster from the prefix cache and counts the hits', async () => {
    // 2,500 prompt tokens at 25k tok/s = 100 ms of prefill when uncached.
    const fleet = await startSimFleet({ nodes: 1, profile: fastProfile({ prefill_tokens_per_s: 25_000 }) });
    try {
      const url = fleet.urls[0] as string;
      const prompt = 'The shared system prompt. '.repeat(385);
      await ttft(url, 'warm up the connection', { max_tokens: 1 });
      const cold = await ttft(url, prompt, { max_tokens: 2 });
      const warm = await minOf(3, () => ttft(url, prompt, { max_tokens: 2 }));
      assert.ok(cold >= 90, `cold TTFT ${cold.toFixed(1)} ms should include ~100 ms of prefill`);
      assert.ok(
        warm < cold / 3,
        `warm TTFT ${warm.toFixed(1)} ms should be far below cold ${cold.toFixed(1)} ms`,
      );
      const hits = await scrapeMetric(url, 'vllm:prefix_cache_hits_total');
      const queries = await scrapeMetric(url, 'vllm:prefix_cache_queries_total');
      assert.ok(hits >= 2400, `hits ${hits}`);
      assert.ok(queries >= 4 * 2500, `queries ${queries}`);
      const other = await ttft(url, `A different start. ${prompt}`, { max_tokens: 2 });
      assert.ok(other >= 90, `a prompt with a different first block must miss, TTFT ${other.toFixed(1)} ms`);
    } finally {
      await fleet.close();
    }
  });

  it('queues a request behind a full slot for about one service time and shows it as waiting', async () => {
    // One slot; 20 tokens × 5 ms = ~100 ms of service.
    const fleet = await startSimFleet({
      nodes: 1,
      profile: fastProfile({ max_running: 1, decode_base_ms: 5 }),
    });
    try {
      const url = fleet.urls[0] as string;
      const firstStart = performance.now();
      const first = postJson(`${url}/v1/chat/completions`, chatBody('first', { max_tokens: 20 }));
      await pollUntil('the first request to run', () => fleet.nodes[0]?.stats().running === 1);
      const secondStart = performance.now();
      const second = ttft(url, 'second', { max_tokens: 1 });
      await pollUntil('vllm:num_requests_waiting = 1', async () => {
        return (await scrapeMetric(url, 'vllm:num_requests_waiting')) === 1;
      });
      assert.equal(await scrapeMetric(url, 'vllm:num_requests_running'), 1);
      await (await first).arrayBuffer();
      const firstDone = performance.now() - firstStart;
      const waited = await second;
      assert.ok(firstDone >= 85, `first request took ${firstDone.toFixed(1)} ms`);
      const remaining = firstDone - (secondStart - firstStart);
      assert.ok(
        waited >= remaining * 0.8,
        `second TTFT ${waited.toFixed(1)} ms, first had ${remaining.toFixed(1)} ms left`,
      );
      assert.ok(
        waited >= 60,
        `a request served at once takes ~2 ms; queued TTFT was ${waited.toFixed(1)} ms`,
      );
      assert.equal(fleet.nodes[0]?.stats().waiting, 0);
    } finally {
      await fleet.close();
    }
  });

  it('runs a node with speed factor 4 about four times faster', async () => {
    const fleet = await startSimFleet({
      nodes: 2,
      profile: fastProfile({ decode_base_ms: 4 }),
      speedFactors: [1, 4],
    });
    try {
      const [slow, fast] = fleet.urls as [string, string];
      const body = chatBody('speed', { max_tokens: 50 }); // ~200 ms at speed 1
      const slowMs = await timed(() => postJson(`${slow}/v1/chat/completions`, body));
      const fastMs = await minOf(3, () => timed(() => postJson(`${fast}/v1/chat/completions`, body)));
      assert.ok(slowMs >= 180, `speed 1: ${slowMs.toFixed(1)} ms`);
      assert.ok(fastMs < slowMs * 0.5, `speed 4: ${fastMs.toFixed(1)} ms vs ${slowMs.toFixed(1)} ms`);
    } finally {
      await fleet.close();
    }
  });

  it('prices an embeddings batch as fixed plus per item', async () => {
    const fleet = await startSimFleet({ nodes: 1, profile: fastProfile({ embedding_per_item_ms: 2 }) });
    try {
      const url = fleet.urls[0] as string;
      const small = await minOf(3, () =>
        timed(() => postJson(`${url}/v1/embeddings`, { model: 'e', input: ['x'] })),
      );
      const inputs = Array.from({ length: 50 }, (_, i) => `item ${i}`);
      const big = await timed(() => postJson(`${url}/v1/embeddings`, { model: 'e', input: inputs }));
      assert.ok(big >= 90, `50 items should take ~101 ms, took ${big.toFixed(1)} ms`);
      assert.ok(small < big / 3, `1 item took ${small.toFixed(1)} ms`);
    } finally {
      await fleet.close();
    }
  });

  it('frees the slot of a stream whose client disconnects', async () => {
    const fleet = await startSimFleet({ nodes: 1, profile: fastProfile({ max_running: 1 }) });
    try {
      const url = fleet.urls[0] as string;
      const node = fleet.nodes[0];
      const abort = new AbortController();
      const res = await postJson(
        `${url}/v1/chat/completions`,
        chatBody('long', { max_tokens: 1000, stream: true }),
        { 'x-sim-chunk-delay-ms': '20' },
        abort.signal,
      );
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      assert.equal(node?.stats().running, 1);
      abort.abort();
      await pollUntil(
        'the slot to be freed',
        () => node?.stats().running === 0 && node.stats().clientAborts === 1,
      );
      const next = await timed(() =>
        postJson(`${url}/v1/chat/completions`, chatBody('next', { max_tokens: 2 })),
      );
      // The abandoned stream had ~20 s left; anything far below that means its slot was freed.
      assert.ok(
        next < 2000,
        `the next request should not wait for the abandoned one, took ${next.toFixed(1)} ms`,
      );
      assert.equal(node?.stats().cancelled, 1);
    } finally {
      await fleet.close();
    }
  });
});
