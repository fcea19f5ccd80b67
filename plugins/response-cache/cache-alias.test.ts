/**
 * response-cache behind model-alias with two public names for one pool model: each public name
 * keeps its own answers, so a hit names the model the client asked for (a hit for `chat-cheap` used
 * to be the answer stored for `chat-small`, naming `chat-small`), plain and streamed.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

describe('response-cache behind model-alias with two names for one model', { timeout: 60_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let client: OpenAI;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: alias
    use: model-alias
    options:
      aliases:
        - { public: chat-small, target: sim-chat }
        - { public: chat-cheap, target: sim-chat }
  - name: cache
    use: response-cache
    options: { ttl_ms: 60000 }
pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]!}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [alias, cache]
`);
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('answers each public name with its own name, plain and streamed', async () => {
    const ask = {
      messages: [{ role: 'user' as const, content: 'two names' }],
      max_tokens: 6,
      temperature: 0,
    };
    const small = await client.chat.completions.create({ ...ask, model: 'chat-small' }).withResponse();
    assert.equal(small.response.headers.get('x-sluice-cache'), 'miss');
    assert.equal(small.data.model, 'chat-small');

    const cheap = await client.chat.completions.create({ ...ask, model: 'chat-cheap' }).withResponse();
    assert.equal(cheap.data.model, 'chat-cheap', 'the answer names the model the client asked for');
    assert.equal(cheap.response.headers.get('x-sluice-cache'), 'miss');

    const again = await client.chat.completions.create({ ...ask, model: 'chat-cheap' }).withResponse();
    assert.equal(again.response.headers.get('x-sluice-cache'), 'hit');
    assert.equal(again.data.model, 'chat-cheap');

    for (const model of ['chat-small', 'chat-cheap']) {
      const { data: stream, response } = await client.chat.completions
        .create({ ...ask, model, stream: true })
        .withResponse();
      assert.equal(response.headers.get('x-sluice-cache'), 'hit');
      for await (const c of stream) assert.equal(c.model, model);
    }
  });
});
