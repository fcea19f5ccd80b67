/**
 * request-limits through a real Sluice and a real simulated node, seen by the OpenAI SDK: a 400
 * whose `param` names the field over its cap, max_tokens lowered instead when clamping, and
 * requests within the caps untouched.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

function config(node: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: limits
    use: request-limits
    options:
      max_tokens: 16
      max_messages: 2
      max_inputs: 2
      fields:
        - { field: tools, forbidden: true }
        - { field: temperature, max: 1 }
        - { field: response_format, allowed: [text] }
  - name: clamp
    use: request-limits
    options: { max_tokens: 3, clamp_max_tokens: true }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: clamped
    match: { headers: { x-route: clamp } }
    pool: gpu
    plugins: [clamp]
  - name: all
    match: {}
    pool: gpu
    plugins: [limits]
`;
}

describe('request-limits', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let client: OpenAI;
  const user = [{ role: 'user' as const, content: 'hello' }];

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls[0]!));
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  const refused = (param: string) => (e: unknown) =>
    e instanceof OpenAI.BadRequestError &&
    e.status === 400 &&
    e.param === param &&
    e.code === 'invalid_value';

  it('refuses max_tokens over the cap with a 400 naming the field', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'm', messages: user, max_tokens: 17 }),
      refused('max_tokens'),
    );
  });

  it('refuses too many messages, inputs, a forbidden field and a value over its maximum', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'm', messages: [...user, ...user, ...user], max_tokens: 2 }),
      refused('messages'),
    );
    await assert.rejects(client.embeddings.create({ model: 'e', input: ['a', 'b', 'c'] }), refused('input'));
    await assert.rejects(
      client.chat.completions.create({
        model: 'm',
        messages: user,
        max_tokens: 2,
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
      }),
      refused('tools'),
    );
    await assert.rejects(
      client.chat.completions.create({ model: 'm', messages: user, max_tokens: 2, temperature: 1.5 }),
      refused('temperature'),
    );
  });

  it('lets a request within the caps through', async () => {
    const r = await client.chat.completions.create({
      model: 'm',
      messages: user,
      max_tokens: 16,
      temperature: 0.5,
    });
    assert.equal(r.object, 'chat.completion');
  });

  it('lowers max_tokens to the cap when clamping', async () => {
    const r = await client.chat.completions.create(
      { model: 'm', messages: user, max_tokens: 500 },
      { headers: { 'x-route': 'clamp' } },
    );
    assert.ok((r.usage?.completion_tokens ?? 99) <= 3, `completion_tokens ${r.usage?.completion_tokens}`);
  });

  it('gives a generation that sets no max_tokens the cap', async () => {
    const r = await client.chat.completions.create(
      { model: 'm', messages: user },
      { headers: { 'x-route': 'clamp' } },
    );
    assert.ok((r.usage?.completion_tokens ?? 99) <= 3, `completion_tokens ${r.usage?.completion_tokens}`);
  });

  it('reads a number sent as a string against its cap', async () => {
    const raw = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: user, max_tokens: 2, temperature: '1.9' }),
    });
    assert.equal(raw.status, 400);
    const body = (await raw.json()) as { error: { param: string; message: string } };
    assert.equal(body.error.param, 'temperature');
    assert.match(body.error.message, /at most 1 \(got 1\.9\)/);
  });

  it('compares an object value by its type for allowed values', async () => {
    const ok = await client.chat.completions.create({
      model: 'm',
      messages: user,
      max_tokens: 2,
      response_format: { type: 'text' },
    });
    assert.equal(ok.object, 'chat.completion');
    await assert.rejects(
      client.chat.completions.create({
        model: 'm',
        messages: user,
        max_tokens: 2,
        response_format: { type: 'json_object' },
      }),
      refused('response_format'),
    );
  });
});
