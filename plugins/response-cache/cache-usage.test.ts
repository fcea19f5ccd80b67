/**
 * response-cache and `usage`: a streamed miss whose client did not ask for usage
 * (`stream_options.include_usage`) is folded into an answer without it. Such an entry serves
 * streams that do not want usage, but not a plain request (OpenAI's answers always carry usage)
 * nor a stream that asks for it: those go to the node, and the answer they store carries usage.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../../test/helpers/sluice.js';
import { redisSkip, startRedis, type TestRedis } from '../../test/helpers/redis.js';

for (const store of ['memory', 'redis'] as const) {
  describe(
    `response-cache keeps usage (${store} store)`,
    { timeout: 60_000, skip: store === 'redis' && redisSkip() },
    () => {
      let redis: TestRedis | null = null;
      let fleet: SimFleet | null = null;
      let t: TestSluice | null = null;
      let client: OpenAI;

      before(async () => {
        if (store === 'redis') redis = await startRedis();
        fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
        const kv = redis === null ? '' : `plugin_store:\n  store: redis\n  redis: { url: ${redis.url} }\n`;
        t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - { name: cache, use: response-cache, options: { store: ${store}, ttl_ms: 60000 } }
pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]!}
routes:
  - { name: all, match: {}, pool: gpu, plugins: [cache] }
${kv}`);
        client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
        // The first requests may race the Redis connection: wait until an answer is stored.
        const warm = { model: 'm', messages: [{ role: 'user' as const, content: 'warm' }], temperature: 0 };
        await waitFor(
          async () =>
            (await client.chat.completions.create(warm).withResponse()).response.headers.get(
              'x-sluice-cache',
            ) === 'hit',
          5000,
          'the cache to store an answer',
        );
      });
      after(async () => {
        await t?.close();
        await fleet?.close();
        await redis?.stop();
      });

      const body = (content: string) => ({
        model: 'm',
        messages: [{ role: 'user' as const, content }],
        max_tokens: 6,
        temperature: 0,
      });

      /** Streams `b`; returns the cache header, the text and the usage event's usage (or null). */
      async function stream(b: object, includeUsage: boolean) {
        const { data, response } = await client.chat.completions
          .create({
            ...(b as ReturnType<typeof body>),
            stream: true,
            ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
          })
          .withResponse();
        let text = '';
        let usage: unknown = null;
        for await (const c of data) {
          text += c.choices[0]?.delta.content ?? '';
          if (c.usage) usage = c.usage;
        }
        return { cache: response.headers.get('x-sluice-cache'), text, usage };
      }

      it('answers a plain request with usage after a streamed miss without it', async () => {
        const b = body('streamed without usage, then plain');
        const first = await stream(b, false);
        assert.equal(first.cache, 'miss');
        assert.equal(first.usage, null);
        const again = await stream(b, false);
        assert.equal(again.cache, 'hit', 'a stream that wants no usage is served from the entry');
        assert.equal(again.text, first.text);

        const plain = await client.chat.completions.create(b).withResponse();
        assert.ok(plain.data.usage, 'a plain answer carries usage');
        assert.equal(plain.data.usage.completion_tokens > 0, true);
        assert.equal(plain.data.choices[0]?.message.content, first.text);
        const hit = await client.chat.completions.create(b).withResponse();
        assert.equal(hit.response.headers.get('x-sluice-cache'), 'hit', 'the answer with usage was stored');
        assert.deepEqual(hit.data.usage, plain.data.usage);
      });

      it('sends the usage event a stream asks for after a streamed miss without it', async () => {
        const b = body('streamed without usage, then with');
        const first = await stream(b, false);
        assert.equal(first.cache, 'miss');
        const withUsage = await stream(b, true);
        assert.ok(withUsage.usage, 'the stream asked for usage and got it');
        assert.equal(withUsage.text, first.text);
        const hit = await stream(b, true);
        assert.equal(hit.cache, 'hit', 'the answer with usage was stored');
        assert.deepEqual(hit.usage, withUsage.usage);
      });
    },
  );
}
