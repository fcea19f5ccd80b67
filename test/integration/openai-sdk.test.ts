/**
 * The official `openai` SDK, unchanged, pointed at Sluice in front of real simulated nodes:
 * chat (plain and streamed), completions, embeddings, models, and errors surfacing as APIError.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedChatText, expectedCompletionText, expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

describe('openai SDK through Sluice', () => {
  let fleet: SimFleet;
  let proxy: TestSluice;
  let client: OpenAI;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    proxy = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}
routes:
  - name: chat
    match: { path: /v1/chat/completions, methods: [POST] }
    pool: gpu
  - name: completions
    match: { path: /v1/completions, methods: [POST] }
    pool: gpu
  - name: embeddings
    match: { path: /v1/embeddings, methods: [POST] }
    pool: gpu
  - name: models
    match: { path: /v1/models, methods: [GET] }
    pool: gpu
`);
    client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  });

  after(async () => {
    await proxy?.close();
    await fleet?.close();
  });

  it('returns a chat completion with content and usage', async () => {
    const r = await client.chat.completions.create({
      model: 'llama-3.1-8b-instruct',
      messages: [{ role: 'user', content: 'Say hello' }],
      max_tokens: 8,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0]?.message.role, 'assistant');
    assert.equal(
      r.choices[0]?.message.content,
      expectedChatText([{ role: 'user', content: 'Say hello' }], 8),
      'the answer is the one the node derives from this prompt',
    );
    assert.ok((r.usage?.completion_tokens ?? 0) > 0);
  });

  it('streams a chat completion chunk by chunk, with the same text as the plain call', async () => {
    const messages = [{ role: 'user' as const, content: 'Stream something deterministic' }];
    const plain = await client.chat.completions.create({
      model: 'llama-3.1-8b-instruct',
      messages,
      max_tokens: 8,
    });
    const stream = await client.chat.completions.create({
      model: 'llama-3.1-8b-instruct',
      messages,
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let chunks = 0;
    let usage = 0;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage.completion_tokens;
    }
    assert.ok(chunks >= 8, `expected one chunk per token, got ${chunks}`);
    assert.equal(text, plain.choices[0]?.message.content);
    assert.equal(usage, plain.usage?.completion_tokens);
  });

  it('returns a text completion', async () => {
    const r = await client.completions.create({
      model: 'llama-3.1-8b-instruct',
      prompt: 'Once upon a time',
      max_tokens: 5,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0]?.text, expectedCompletionText('Once upon a time', 5));
  });

  it('returns embeddings in input order that belong to their inputs', async () => {
    const inputs = ['alpha', 'beta', 'gamma'];
    const r = await client.embeddings.create({ model: 'bge-base-en-v1.5', input: inputs });
    assert.equal(r.data.length, 3);
    for (let i = 0; i < inputs.length; i++) {
      const got = r.data[i]!;
      assert.equal(got.index, i);
      const want = expectedEmbedding(inputs[i]!, got.embedding.length);
      got.embedding.forEach((v, j) =>
        assert.ok(Math.abs(v - want[j]!) < 1e-6, `embedding ${i} differs at ${j}`),
      );
    }
  });

  it('lists models', async () => {
    const page = await client.models.list();
    assert.ok(page.data.length > 0);
    assert.ok(page.data.every((m) => typeof m.id === 'string'));
  });

  it('surfaces a route miss as an APIError with status 404 and an OpenAI error code', async () => {
    await assert.rejects(
      () => client.post('/no/such/endpoint', { body: {} }),
      (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, 404);
        assert.equal(e.code, 'route_not_found');
        return true;
      },
    );
  });

  it('surfaces a node error as an APIError with the node status', async () => {
    await assert.rejects(
      () =>
        client.chat.completions.create(
          { model: 'llama-3.1-8b-instruct', messages: [{ role: 'user', content: 'x' }] },
          { headers: { 'x-sim-status': '503' } },
        ),
      (e: unknown) => e instanceof OpenAI.APIError && e.status === 503,
    );
  });
});
