/**
 * Micro-batching on a route, end to end: a real Sluice in front of a real simulated node, many
 * concurrent single-input embedding requests coalesced into fewer upstream calls, each client
 * getting exactly its own result; fanout items sent with the client's own bytes, and streaming
 * requests kept out of micro-batches.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { decodeBase64Embedding, expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

function config(node: string, mode: string, path: string): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: batched
    match: { path: ${path} }
    pool: gpu
    batching: { mode: ${mode}, max_batch_size: 16, max_wait_ms: 20 }
`;
}

interface EmbeddingAnswer {
  data: { index: number; embedding: number[] | string }[];
  usage: { prompt_tokens: number };
}

describe('micro-batching on a route', () => {
  let fleet: SimFleet;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('coalesces concurrent embedding requests into fewer calls and gives each its own vector', async () => {
    t = await startTestSluice(config(fleet.urls[0]!, 'native', '/v1/embeddings'));
    const node = fleet.nodes[0]!;
    const before = node.stats().served;
    const texts = Array.from({ length: 48 }, (_, i) => `text number ${i}`);
    const answers = await Promise.all(
      texts.map(async (text) => {
        const r = await fetch(`${t!.url}/v1/embeddings`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-embed', input: text, encoding_format: 'float' }),
        });
        assert.equal(r.status, 200);
        return (await r.json()) as EmbeddingAnswer;
      }),
    );
    const calls = node.stats().served - before;
    assert.ok(calls < texts.length / 2, `${calls} upstream calls for ${texts.length} requests`);
    answers.forEach((a, i) => {
      assert.equal(a.data.length, 1);
      assert.equal(a.data[0]!.index, 0);
      const got = a.data[0]!.embedding;
      const vector = typeof got === 'string' ? decodeBase64Embedding(got) : got;
      const want = expectedEmbedding(texts[i]!, vector.length);
      vector.forEach((v, j) =>
        assert.ok(Math.abs(v - want[j]!) < 1e-6, `request ${i} got another input's embedding`),
      );
      assert.ok(a.usage.prompt_tokens > 0);
    });
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_batch_items_total\{route="batched"\} 48/);
  });

  it('fans a micro-batch of chat requests out as single calls, each answer for its own request', async () => {
    await t?.close();
    t = await startTestSluice(config(fleet.urls[0]!, 'fanout', '/v1/chat/completions'));
    const prompts = Array.from({ length: 12 }, (_, i) => `question ${i}`);
    const answers = await Promise.all(
      prompts.map(async (p) => {
        const r = await fetch(`${t!.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: p }], max_tokens: 4 }),
        });
        assert.equal(r.status, 200);
        return (await r.json()) as { choices: { message: { content: string } }[] };
      }),
    );
    // Deterministic outputs: the same prompt sent directly gives the same text.
    for (let i = 0; i < prompts.length; i += 5) {
      const direct = await fetch(`${fleet.urls[0]!}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: prompts[i] }],
          max_tokens: 4,
        }),
      });
      const d = (await direct.json()) as { choices: { message: { content: string } }[] };
      assert.equal(answers[i]!.choices[0]!.message.content, d.choices[0]!.message.content);
    }
  });

  it('sends a fanout item upstream with the exact bytes the client sent', async () => {
    await t?.close();
    t = await startTestSluice(config(fleet.urls[0]!, 'fanout', '/debug/echo'));
    // Spacing and a non-ASCII escape that serialising the parsed body again would change.
    const body = '{ "model" : "m",\n  "input": "caf\\u00e9",  "n": 1.0 }';
    const r = await fetch(`${t.url}/debug/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    assert.equal(r.status, 200);
    const echo = (await r.json()) as { body_length: number; body_sha256: string };
    assert.equal(echo.body_length, Buffer.byteLength(body));
    assert.equal(echo.body_sha256, createHash('sha256').update(body).digest('hex'));
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_batch_items_total\{route="batched"\} 1\n/);
  });

  it('streams a stream: true request on a batching route as SSE instead of holding it for a micro-batch', async () => {
    await t?.close();
    t = await startTestSluice(config(fleet.urls[0]!, 'fanout', '/v1/chat/completions'));
    const r = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 4,
      }),
    });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.match(await r.text(), /data: \[DONE\]/);
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_batch_items_total\{route="batched"\} 0\n/);
  });

  it('reports a batched answer in x-sluice-route and counts its bytes in the access log', async () => {
    await t?.close();
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]!}
routes:
  - name: batched
    match: { path: /v1/embeddings }
    pool: gpu
    route_header: true
    batching: { mode: native, max_batch_size: 16, max_wait_ms: 20 }
access_log:
  destination: logs/access.log
`);
    const r = await fetch(`${t.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'batched-route-1' },
      body: JSON.stringify({ model: 'sim-embed', input: 'route me' }),
    });
    assert.equal(r.status, 200);
    const text = await r.text();
    assert.equal(r.headers.get('x-sluice-route'), 'pool=gpu; policy=round-robin; batched; attempt=1');
    const file = join(dirname(t.configPath), 'logs', 'access.log');
    let line: { request_id: string; bytes: number } | undefined;
    await waitFor(
      async () => {
        const lines = (await readFile(file, 'utf8').catch(() => '')).split('\n').filter((l) => l !== '');
        line = lines
          .map((l) => JSON.parse(l) as { request_id: string; bytes: number })
          .find((l) => l.request_id === 'batched-route-1');
        return line !== undefined;
      },
      5000,
      'the access-log line',
    );
    assert.equal(line!.bytes, Buffer.byteLength(text));
  });
});
