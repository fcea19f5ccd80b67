/**
 * model-alias through a real Sluice and real simulated nodes that refuse any model but their own
 * (as vLLM does), seen by the official OpenAI SDK: public names in, the pool's name to the node,
 * the public name back in plain and streamed answers, wildcard aliases, and /v1/models.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { loadSimProfile } from '../../loadtest/sim/profile-loader.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

function config(node: string, strict: boolean): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: alias
    use: model-alias
    options:
      strict: ${strict}
      aliases:
        - { public: gpt-fast, target: sim-chat }
        - { public: embed-small, target: sim-embed }
        - { public: "fast-*", target: "sim-*" }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [alias]
`;
}

describe('model-alias', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let client: OpenAI;

  before(async () => {
    fleet = await startSimFleet({
      nodes: 1,
      port: 0,
      profile: { ...loadSimProfile('fast'), strict_models: true },
    });
    t = await startTestSluice(config(fleet.urls[0]!, false));
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('sends the pool’s model name to the node and the public name back', async () => {
    const r = await client.chat.completions.create({
      model: 'gpt-fast',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
    });
    assert.equal(r.model, 'gpt-fast');
    assert.ok((r.choices[0]?.message.content ?? '').length > 0);
  });

  it('rewrites the model in every event of a stream', async () => {
    const stream = await client.chat.completions.create({
      model: 'gpt-fast',
      messages: [{ role: 'user', content: 'hello there' }],
      max_tokens: 8,
      stream: true,
    });
    let events = 0;
    for await (const chunk of stream) {
      events++;
      assert.equal(chunk.model, 'gpt-fast');
    }
    assert.ok(events >= 2);
  });

  it('maps a wildcard alias and embeddings', async () => {
    const c = await client.completions.create({ model: 'fast-chat', prompt: 'x', max_tokens: 2 });
    assert.equal(c.model, 'fast-chat');
    const e = await client.embeddings.create({ model: 'embed-small', input: ['a', 'b'] });
    assert.equal(e.model, 'embed-small');
    assert.equal(e.data.length, 2);
  });

  it('lists the public names on /v1/models', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['gpt-fast', 'embed-small']);
  });

  it('passes other names through, or refuses them with 404 when strict', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: 'other',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 2,
      }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
    await t!.close();
    t = await startTestSluice(config(fleet!.urls[0]!, true));
    const strict = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    await assert.rejects(
      strict.chat.completions.create({
        model: 'other',
        messages: [{ role: 'user', content: 'x' }],
        max_tokens: 2,
      }),
      (e: unknown) =>
        e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && /does not exist/.test(e.message),
    );
  });
});
