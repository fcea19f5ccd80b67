/**
 * response-cache through a real Sluice and real simulated nodes, seen by the OpenAI SDK: a repeated
 * deterministic request is answered from the cache (x-sluice-cache: hit) with the node's answer,
 * a streamed request is served from a stored complete answer as SSE (and a streamed miss is stored
 * for plain requests), keys are per tenant, sampling requests are never cached, entries expire, and
 * with Redis two Sluice instances share the entries.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';
import { redisSkip, startRedis, type TestRedis } from '../../test/helpers/redis.js';
import { metric } from '../../test/plugin/plugin-helpers.js';

function config(node: string, options: string, extra = ''): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: cache
    use: response-cache
    options: ${options}
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [cache]
${extra}`;
}

const msg = (content: string) => [{ role: 'user' as const, content }];

async function raw(t: TestSluice, body: object, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

describe('response-cache', { timeout: 60_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let client: OpenAI;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls[0]!, '{ ttl_ms: 60000 }'));
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('answers a repeated temperature-0 chat request from the cache', async () => {
    const body = { model: 'm', messages: msg('cache me'), max_tokens: 8, temperature: 0 };
    const first = await client.chat.completions.create(body).withResponse();
    assert.equal(first.response.headers.get('x-sluice-cache'), 'miss');
    const served = (await metric(t!, 'sluice_plugin_response_cache_hits_total{plugin="cache"}')) || 0;
    const second = await client.chat.completions.create(body).withResponse();
    assert.equal(second.response.headers.get('x-sluice-cache'), 'hit');
    assert.deepEqual(second.data, first.data);
    assert.equal(await metric(t!, 'sluice_plugin_response_cache_hits_total{plugin="cache"}'), served + 1);
    assert.ok((await metric(t!, 'sluice_plugin_response_cache_saved_seconds_total{plugin="cache"}')) > 0);
  });

  it("honours the client's Cache-Control: no-cache recomputes and stores, no-store bypasses", async () => {
    const body = { model: 'm', messages: msg('cache control'), max_tokens: 8, temperature: 0 };
    const first = await raw(t!, body);
    assert.equal(first.headers.get('x-sluice-cache'), 'miss');
    await first.text();
    const hit = await raw(t!, body);
    assert.equal(hit.headers.get('x-sluice-cache'), 'hit');
    await hit.text();
    const fresh = await raw(t!, body, { 'cache-control': 'no-cache' });
    assert.equal(fresh.headers.get('x-sluice-cache'), 'miss');
    await fresh.text();
    const bypass = await raw(t!, body, { 'cache-control': 'max-age=0, no-store' });
    assert.equal(bypass.status, 200);
    assert.equal(bypass.headers.get('x-sluice-cache'), null);
    await bypass.text();
    const after = await raw(t!, body);
    assert.equal(after.headers.get('x-sluice-cache'), 'hit', 'the no-cache answer was stored');
    await after.text();
  });

  it('caches embeddings keyed on the canonical body (key order does not matter)', async () => {
    const a = await fetch(`${t!.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"e","input":["x","y"]}',
    });
    assert.equal(a.headers.get('x-sluice-cache'), 'miss');
    const first = await a.text();
    const b = await fetch(`${t!.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{ "input": ["x", "y"], "model": "e" }',
    });
    assert.equal(b.headers.get('x-sluice-cache'), 'hit');
    assert.equal(await b.text(), first);
  });

  it('serves a streamed request from the stored complete answer as SSE', async () => {
    const body = { model: 'm', messages: msg('stream from cache'), max_tokens: 8, temperature: 0 };
    const plain = await client.chat.completions.create(body);
    const { data: stream, response } = await client.chat.completions
      .create({ ...body, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    assert.equal(response.headers.get('x-sluice-cache'), 'hit');
    assert.match(response.headers.get('content-type') ?? '', /text\/event-stream/);
    let text = '';
    let usage: unknown = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      if (c.usage) usage = c.usage;
    }
    assert.equal(text, plain.choices[0]?.message.content);
    assert.deepEqual(usage, plain.usage);
  });

  it('stores a streamed miss with its usage as a complete answer for later plain requests', async () => {
    const body = { model: 'm', messages: msg('stream first'), max_tokens: 8, temperature: 0 };
    const { data: stream, response } = await client.chat.completions
      .create({ ...body, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    assert.equal(response.headers.get('x-sluice-cache'), 'miss');
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
    const later = await client.chat.completions.create(body).withResponse();
    assert.equal(later.response.headers.get('x-sluice-cache'), 'hit');
    assert.equal(later.data.choices[0]?.message.content, text);
    assert.equal(later.data.object, 'chat.completion');
    assert.ok(later.data.usage, 'the answer carries the usage the stream had');
  });

  it('never caches sampling or tool requests', async () => {
    for (const extra of [
      { temperature: 0.7 },
      {},
      { temperature: 0, tools: [{ type: 'function', function: { name: 'f' } }] },
    ]) {
      const body = { model: 'm', messages: msg('sampled'), max_tokens: 4, ...extra };
      await (await raw(t!, body)).text();
      const r = await raw(t!, body);
      assert.equal(r.headers.get('x-sluice-cache'), null);
      await r.text();
    }
  });

  it('keeps tenants apart and forgets entries after the TTL', async () => {
    await t!.close();
    process.env['SLUICE_TEST_CACHE_T1'] = 'sk-cache-t1';
    process.env['SLUICE_TEST_CACHE_T2'] = 'sk-cache-t2';
    t = await startTestSluice(
      config(
        fleet!.urls[0]!,
        '{ ttl_ms: 300 }',
        `tenants:
  - { name: t1, keys: [{ env: SLUICE_TEST_CACHE_T1 }] }
  - { name: t2, keys: [{ env: SLUICE_TEST_CACHE_T2 }] }
`,
      ),
    );
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    const body = { model: 'm', messages: msg('tenant'), max_tokens: 4, temperature: 0 };
    await (await raw(t, body, as('sk-cache-t1'))).text();
    const again = await raw(t, body, as('sk-cache-t1'));
    assert.equal(again.headers.get('x-sluice-cache'), 'hit');
    await again.text();
    const other = await raw(t, body, as('sk-cache-t2'));
    assert.equal(other.headers.get('x-sluice-cache'), 'miss');
    await other.text();
    await new Promise((r) => setTimeout(r, 400));
    const expired = await raw(t, body, as('sk-cache-t1'));
    assert.equal(expired.headers.get('x-sluice-cache'), 'miss');
    await expired.text();
  });
});

describe('response-cache in Redis', { timeout: 30_000, skip: redisSkip() }, () => {
  let redis: TestRedis | null = null;
  let fleet: SimFleet | null = null;
  let a: TestSluice | null = null;
  let b: TestSluice | null = null;

  before(async () => {
    redis = await startRedis();
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    const store = `plugin_store:
  store: redis
  redis: { url: ${redis.url} }
`;
    a = await startTestSluice(config(fleet.urls[0]!, '{ store: redis }', store));
    b = await startTestSluice(config(fleet.urls[0]!, '{ store: redis }', store));
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await fleet?.close();
    await redis?.stop();
  });

  it('shares answers between two Sluice instances', async () => {
    const body = { model: 'm', messages: msg('shared'), max_tokens: 6, temperature: 0 };
    let first: Response | null = null;
    // The first request may race the Redis connection: retry until Redis answers (a miss is stored).
    const until = Date.now() + 5000;
    for (;;) {
      first = await raw(a!, body);
      const text = await first.text();
      await new Promise((r) => setTimeout(r, 50));
      const second = await raw(b!, body);
      if (second.headers.get('x-sluice-cache') === 'hit') {
        assert.equal(await second.text(), text);
        return;
      }
      await second.text();
      if (Date.now() > until) assert.fail('instance b never saw instance a’s answer');
    }
  });
});

describe(
  'response-cache behind model-alias (the example config: [alias, cache])',
  { timeout: 60_000 },
  () => {
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

    it('stores the answer the alias rewrote: a hit is that answer, plain and streamed', async () => {
      const body = {
        model: 'chat-small',
        messages: msg('cache me behind an alias'),
        max_tokens: 6,
        temperature: 0,
      };
      const first = await client.chat.completions.create(body).withResponse();
      assert.equal(first.response.headers.get('x-sluice-cache'), 'miss');
      assert.equal(first.data.model, 'chat-small', 'the alias rewrote the answer');
      const second = await client.chat.completions.create(body).withResponse();
      assert.equal(second.response.headers.get('x-sluice-cache'), 'hit');
      assert.deepEqual(second.data, first.data);
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let text = '';
      for await (const c of stream) {
        assert.equal(c.model, 'chat-small');
        text += c.choices[0]?.delta.content ?? '';
      }
      assert.equal(text, first.data.choices[0]!.message.content);
    });

    // Two public names of one pool model keep their own answers: a hit names the model the client
    // asked for (one for chat-cheap was the answer stored for chat-small, naming chat-small).
    it('answers each public name of one model with its own name, plain and streamed', async () => {
      const ask = {
        messages: msg('two names'),
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
  },
);
