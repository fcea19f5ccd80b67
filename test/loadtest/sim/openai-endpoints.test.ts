/**
 * A simulated node speaks OpenAI's wire format: response shapes of chat, completions, embeddings and
 * models, SSE framing, request validation errors, and the health, metrics and debug endpoints.
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { startSimFleet, type SimFleet } from '../../../loadtest/sim/fleet.js';
import {
  expectedChatText,
  expectedCompletionText,
  expectedEmbedding,
} from '../../../loadtest/sim/outputs.js';
import { chatBody, fastProfile, postJson, readSse } from './sim-test-helpers.js';

describe('simulated node OpenAI endpoints', () => {
  let fleet: SimFleet;
  let url: string;

  before(async () => {
    fleet = await startSimFleet({
      nodes: 1,
      profile: fastProfile({ chat_model: 'sim-chat', embedding_dim: 16 }),
    });
    url = fleet.urls[0] as string;
  });
  after(() => fleet?.close());

  it('answers a chat completion in the OpenAI shape with usage', async () => {
    const res = await postJson(`${url}/v1/chat/completions`, chatBody('hello there', { max_tokens: 5 }));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const body = (await res.json()) as Record<string, unknown>;
    assert.match(body['id'] as string, /^chatcmpl-/);
    assert.equal(body['object'], 'chat.completion');
    assert.equal(typeof body['created'], 'number');
    assert.equal(body['model'], 'sim-chat');
    const choices = body['choices'] as Record<string, unknown>[];
    assert.equal(choices.length, 1);
    const choice = choices[0] as Record<string, unknown>;
    assert.equal(choice['index'], 0);
    assert.equal(choice['finish_reason'], 'length');
    const message = choice['message'] as Record<string, unknown>;
    assert.equal(message['role'], 'assistant');
    assert.equal(message['content'], expectedChatText([{ role: 'user', content: 'hello there' }], 5));
    assert.equal(message['content'].split(' ').length, 5);
    const usage = body['usage'] as Record<string, number>;
    assert.equal(usage['completion_tokens'], 5);
    assert.ok((usage['prompt_tokens'] ?? 0) > 0);
    assert.equal(usage['total_tokens'], (usage['prompt_tokens'] ?? 0) + 5);
  });

  it('uses max_completion_tokens, then max_tokens, then the profile default for the output length', async () => {
    const lengths: number[] = [];
    for (const extra of [{ max_completion_tokens: 3, max_tokens: 9 }, { max_tokens: 4 }, {}]) {
      const res = await postJson(`${url}/v1/chat/completions`, chatBody('lengths', extra));
      const body = (await res.json()) as { usage: { completion_tokens: number } };
      lengths.push(body.usage.completion_tokens);
    }
    assert.deepEqual(lengths, [3, 4, 8]);
  });

  it('answers a text completion in the OpenAI shape', async () => {
    const res = await postJson(`${url}/v1/completions`, {
      model: 'sim-chat',
      prompt: 'Once upon',
      max_tokens: 6,
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as Record<string, unknown>;
    assert.match(body['id'] as string, /^cmpl-/);
    assert.equal(body['object'], 'text_completion');
    const choice = (body['choices'] as Record<string, unknown>[])[0] as Record<string, unknown>;
    assert.equal(choice['text'], expectedCompletionText('Once upon', 6));
    assert.equal(choice['finish_reason'], 'length');
    assert.deepEqual(body['usage'], { prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 });
  });

  it('streams a chat completion as one SSE chunk per token, role first, usage last, then [DONE]', async () => {
    const body = chatBody('stream me', {
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    const res = await postJson(`${url}/v1/chat/completions`, body);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const sse = await readSse(res);
    assert.equal(sse.error, undefined);
    assert.equal(sse.events.length, 6); // 4 tokens + usage + [DONE]
    assert.equal(sse.events.at(-1), '[DONE]');
    const chunks = sse.events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, unknown>);
    const ids = new Set(chunks.map((c) => c['id']));
    assert.equal(ids.size, 1);
    let text = '';
    chunks.slice(0, 4).forEach((c, i) => {
      assert.equal(c['object'], 'chat.completion.chunk');
      assert.equal(c['usage'], null);
      const choice = (c['choices'] as Record<string, unknown>[])[0] as Record<string, unknown>;
      const delta = choice['delta'] as Record<string, string>;
      assert.equal(delta['role'], i === 0 ? 'assistant' : undefined);
      assert.equal(choice['finish_reason'], i === 3 ? 'length' : null);
      text += delta['content'];
    });
    assert.equal(text, expectedChatText([{ role: 'user', content: 'stream me' }], 4));
    const last = chunks[4] as Record<string, unknown>;
    assert.deepEqual(last['choices'], []);
    assert.equal((last['usage'] as Record<string, number>)['completion_tokens'], 4);
  });

  it('streams a completion without a usage chunk when include_usage is not set', async () => {
    const res = await postJson(`${url}/v1/completions`, {
      model: 'm',
      prompt: 'abc',
      max_tokens: 3,
      stream: true,
    });
    const sse = await readSse(res);
    assert.equal(sse.events.length, 4);
    assert.equal(sse.events[3], '[DONE]');
    const chunks = sse.events.slice(0, 3).map((e) => JSON.parse(e) as Record<string, unknown>);
    for (const c of chunks) {
      assert.equal(c['object'], 'text_completion');
      assert.equal('usage' in c, false);
    }
    const text = chunks
      .map((c) => ((c['choices'] as { text: string }[])[0] as { text: string }).text)
      .join('');
    assert.equal(text, expectedCompletionText('abc', 3));
  });

  it('answers embeddings for a string and for an array, in input order', async () => {
    const one = await postJson(`${url}/v1/embeddings`, { model: 'sim-embed', input: 'solo' });
    assert.equal(one.status, 200);
    const oneBody = (await one.json()) as Record<string, unknown>;
    assert.equal(oneBody['object'], 'list');
    assert.equal(oneBody['model'], 'sim-embed');
    assert.deepEqual(oneBody['usage'], { prompt_tokens: 1, total_tokens: 1 });
    const inputs = ['first text', 'second', 'third input here'];
    const res = await postJson(`${url}/v1/embeddings`, {
      model: 'sim-embed',
      input: inputs,
      encoding_format: 'float',
    });
    const body = (await res.json()) as { data: { object: string; index: number; embedding: number[] }[] };
    assert.equal(body.data.length, 3);
    body.data.forEach((d, i) => {
      assert.equal(d.object, 'embedding');
      assert.equal(d.index, i);
      assert.deepEqual(d.embedding, expectedEmbedding(inputs[i] as string, 16));
    });
  });

  it('lists the profile chat and embedding models', async () => {
    const res = await fetch(`${url}/v1/models`);
    const body = (await res.json()) as {
      object: string;
      data: { id: string; object: string; owned_by: string }[];
    };
    assert.equal(body.object, 'list');
    assert.deepEqual(
      body.data.map((m) => [m.id, m.object]),
      [
        ['sim-chat', 'model'],
        ['sim-embed', 'model'],
      ],
    );
  });

  it('rejects malformed requests with 400 and an OpenAI error body', async () => {
    const cases: [string, string | Record<string, unknown>][] = [
      ['/v1/chat/completions', '{not json'],
      ['/v1/chat/completions', { model: 'm', messages: [] }],
      ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }],
      [
        '/v1/chat/completions',
        { model: 'm', messages: [{ role: 'user', content: 'x' }], stream_options: {} },
      ],
      ['/v1/completions', { model: 'm', prompt: [1, 2, 3] }],
      ['/v1/embeddings', { model: 'e', input: [[1, 2], [3]] }],
      ['/v1/embeddings', { model: 'e', input: 'x', encoding_format: 'int8' }],
      ['/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 40000 }],
    ];
    for (const [path, body] of cases) {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
      const err = (await res.json()) as { error: { message: string; type: string; code: string } };
      assert.equal(err.error.type, 'invalid_request_error');
      assert.ok(err.error.message.length > 0);
    }
  });

  it('answers 404 for unknown paths and 405 for wrong methods', async () => {
    assert.equal((await fetch(`${url}/nope`)).status, 404);
    const res = await fetch(`${url}/v1/chat/completions`);
    assert.equal(res.status, 405);
    assert.equal(res.headers.get('allow'), 'POST');
  });

  it('reports health and vLLM-named metrics', async () => {
    assert.equal((await fetch(`${url}/health`)).status, 200);
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:gpu_cache_usage_perc',
      'vllm:prefix_cache_hits_total',
      'vllm:prefix_cache_queries_total',
      'vllm:request_success_total',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
    }
    assert.match(text, /^sluice_sim_requests_total\{endpoint="chat",outcome="200"\} [1-9]/m);
  });

  it('echoes the raw request headers in order, with the body length and hash', async () => {
    const payload = 'some body bytes';
    const res = await fetch(`${url}/debug/echo?x=1`, {
      method: 'PUT',
      headers: [
        ['X-First', 'a'],
        ['x-second', 'b'],
      ],
      body: payload,
    });
    assert.equal(res.status, 200);
    const echo = (await res.json()) as {
      method: string;
      url: string;
      headers: [string, string][];
      body_length: number;
      body_sha256: string;
    };
    assert.equal(echo.method, 'PUT');
    assert.equal(echo.url, '/debug/echo?x=1');
    const names = echo.headers.map(([n]) => n);
    assert.ok(names.indexOf('X-First') >= 0 && names.indexOf('X-First') < names.indexOf('x-second'));
    assert.deepEqual(
      echo.headers.find(([n]) => n === 'X-First'),
      ['X-First', 'a'],
    );
    assert.equal(echo.body_length, payload.length);
    assert.equal(echo.body_sha256, createHash('sha256').update(payload).digest('hex'));
  });
});

describe('simulated node with strict_models', () => {
  it('answers 404 model_not_found for a model it does not serve', async () => {
    const fleet = await startSimFleet({ nodes: 1, profile: fastProfile({ strict_models: true }) });
    try {
      const url = fleet.urls[0] as string;
      const bad = await postJson(`${url}/v1/chat/completions`, { ...chatBody('x'), model: 'other' });
      assert.equal(bad.status, 404);
      assert.equal(((await bad.json()) as { error: { code: string } }).error.code, 'model_not_found');
      const good = await postJson(`${url}/v1/chat/completions`, chatBody('x'));
      assert.equal(good.status, 200);
    } finally {
      await fleet.close();
    }
  });
});
