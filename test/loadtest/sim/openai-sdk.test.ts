/**
 * The official openai npm client works against a simulated node unchanged: chat (plain and streamed
 * with usage), embeddings (which the SDK requests as base64 by default), models, and typed errors.
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../../loadtest/sim/fleet.js';
import { expectedChatText, expectedEmbedding } from '../../../loadtest/sim/outputs.js';
import { fastProfile } from './sim-test-helpers.js';

describe('openai SDK against a simulated node', () => {
  let fleet: SimFleet;
  let client: OpenAI;
  const messages = [{ role: 'user' as const, content: 'hello sdk' }];

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, profile: fastProfile() });
    client = new OpenAI({ baseURL: `${fleet.urls[0] as string}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => fleet?.close());

  it('decodes the default base64 embeddings to the expected vectors', async () => {
    const res = await client.embeddings.create({ model: 'sim-embed', input: ['left', 'right'] });
    assert.deepEqual(
      res.data.map((d) => d.embedding),
      [expectedEmbedding('left', 64), expectedEmbedding('right', 64)],
    );
  });

  it('reads a chat completion and a streamed one with the same text and usage', async () => {
    const plain = await client.chat.completions.create({ model: 'sim-chat', messages, max_tokens: 5 });
    assert.equal(plain.choices[0]?.message.content, expectedChatText(messages, 5));
    const stream = await client.chat.completions.create({
      model: 'sim-chat',
      messages,
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let completionTokens = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      completionTokens = chunk.usage?.completion_tokens ?? completionTokens;
    }
    assert.equal(text, plain.choices[0]?.message.content);
    assert.equal(completionTokens, 5);
  });

  it('lists models and surfaces injected statuses as typed errors', async () => {
    const models = await client.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['sim-chat', 'sim-embed'],
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'sim-chat', messages }, { headers: { 'x-sim-status': '429' } }),
      (err: unknown) => err instanceof OpenAI.RateLimitError && err.status === 429,
    );
  });
});
