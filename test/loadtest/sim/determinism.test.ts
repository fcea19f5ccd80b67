/**
 * Outputs are a pure function of the input: the same prompt gives the same text on any node, a
 * different prompt a different text, and embeddings equal `expectedEmbedding` in both encodings.
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSimFleet, type SimFleet } from '../../../loadtest/sim/fleet.js';
import {
  chatPromptText,
  decodeBase64Embedding,
  embeddingVector,
  estimateTokens,
  expectedChatText,
  expectedEmbedding,
  generatedWords,
} from '../../../loadtest/sim/outputs.js';
import { chatBody, fastProfile, postJson } from './sim-test-helpers.js';

async function chatText(url: string, content: string, maxTokens = 8): Promise<string> {
  const res = await postJson(`${url}/v1/chat/completions`, chatBody(content, { max_tokens: maxTokens }));
  const body = (await res.json()) as { choices: { message: { content: string } }[] };
  return body.choices[0]?.message.content ?? '';
}

async function embed(
  url: string,
  input: string[],
  format: 'float' | 'base64',
  extra = {},
): Promise<unknown[]> {
  const res = await postJson(`${url}/v1/embeddings`, {
    model: 'e',
    input,
    encoding_format: format,
    ...extra,
  });
  assert.equal(res.status, 200);
  return ((await res.json()) as { data: { embedding: unknown }[] }).data.map((d) => d.embedding);
}

describe('deterministic outputs', () => {
  let fleet: SimFleet;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, profile: fastProfile(), speedFactors: [1, 3] });
  });
  after(() => fleet?.close());

  it('gives the same chat text for the same messages on every node and every call', async () => {
    const [a, b] = fleet.urls as [string, string];
    const first = await chatText(a, 'tell me a story');
    assert.equal(await chatText(a, 'tell me a story'), first);
    assert.equal(await chatText(b, 'tell me a story'), first);
    assert.equal(first, expectedChatText([{ role: 'user', content: 'tell me a story' }], 8));
  });

  it('gives different text for different messages', async () => {
    const url = fleet.urls[0] as string;
    const texts = new Set<string>();
    for (let i = 0; i < 20; i++) texts.add(await chatText(url, `prompt number ${i}`));
    assert.equal(texts.size, 20);
  });

  it('makes a shorter output a prefix of a longer one for the same prompt', async () => {
    const url = fleet.urls[0] as string;
    const long = await chatText(url, 'prefix property', 12);
    const short = await chatText(url, 'prefix property', 5);
    assert.ok(long.startsWith(short));
    assert.equal(short.split(' ').length, 5);
  });

  it('returns the embedding expectedEmbedding computes, a unit vector, for each input i', async () => {
    const url = fleet.urls[1] as string;
    const inputs = ['alpha', 'beta', 'alpha', 'gamma delta'];
    const vectors = (await embed(url, inputs, 'float')) as number[][];
    vectors.forEach((v, i) => {
      assert.deepEqual(v, expectedEmbedding(inputs[i] as string, 64));
      const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
      assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
    });
    assert.deepEqual(vectors[0], vectors[2]);
    assert.notDeepEqual(vectors[0], vectors[1]);
  });

  it('encodes base64 embeddings as little-endian float32 that decode to the float values', async () => {
    const url = fleet.urls[0] as string;
    const inputs = ['one', 'two'];
    const b64 = (await embed(url, inputs, 'base64')) as string[];
    const floats = (await embed(url, inputs, 'float')) as number[][];
    b64.forEach((s, i) => {
      assert.equal(typeof s, 'string');
      assert.deepEqual(decodeBase64Embedding(s), floats[i]);
    });
  });

  it('honours the dimensions parameter', async () => {
    const url = fleet.urls[0] as string;
    const [v] = (await embed(url, ['dims'], 'float', { dimensions: 8 })) as number[][];
    assert.deepEqual(v, expectedEmbedding('dims', 8));
  });
});

describe('output helpers', () => {
  it('estimates one token per four characters, rounding up', () => {
    assert.equal(estimateTokens(''), 0);
    assert.equal(estimateTokens('abcd'), 1);
    assert.equal(estimateTokens('abcde'), 2);
  });

  it('renders chat prompts so that the next turn starts with the previous prompt plus its reply', () => {
    const turn1 = [{ role: 'user', content: 'hi' }];
    const reply = generatedWords(chatPromptText(turn1), 4).join(' ');
    const turn2 = [...turn1, { role: 'assistant', content: reply }, { role: 'user', content: 'more' }];
    assert.ok(chatPromptText(turn2).startsWith(chatPromptText(turn1) + reply));
  });

  it('returns float32-exact embedding values', () => {
    const v = embeddingVector('exact', 32);
    assert.deepEqual(Array.from(Float32Array.from(expectedEmbedding('exact', 32))), Array.from(v));
  });
});
