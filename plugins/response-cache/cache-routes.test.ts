/**
 * One response-cache instance listed on two routes whose pools answer differently: each route keeps
 * its own answers (the key holds the route's name), so a request on one route is never served the
 * answer another route's pool gave.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';
import { startScriptedNode, type ScriptedNode } from '../../test/helpers/scripted-node.js';

/** A node whose every answer says `who`. */
function answering(who: string): Promise<ScriptedNode> {
  return startScriptedNode((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${who}`,
          object: 'chat.completion',
          created: 0,
          model: 'm',
          choices: [{ index: 0, message: { role: 'assistant', content: who }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
}

describe('one response-cache instance on two routes', { timeout: 30_000 }, () => {
  let a: ScriptedNode | null = null;
  let b: ScriptedNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    a = await answering('pool a');
    b = await answering('pool b');
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - { name: cache, use: response-cache, options: { ttl_ms: 60000 } }
pools:
  - { name: a, nodes: [{ url: ${a.url} }] }
  - { name: b, nodes: [{ url: ${b.url} }] }
routes:
  - { name: ra, match: { headers: { x-route: a } }, pool: a, plugins: [cache] }
  - { name: rb, match: { headers: { x-route: b } }, pool: b, plugins: [cache] }
`);
  });
  after(async () => {
    await t?.close();
    await a?.close();
    await b?.close();
  });

  async function ask(route: string): Promise<{ cache: string | null; content: string }> {
    const r = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-route': route },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'same' }], temperature: 0 }),
    });
    const body = (await r.json()) as { choices: { message: { content: string } }[] };
    return { cache: r.headers.get('x-sluice-cache'), content: body.choices[0]!.message.content };
  }

  it("answers each route from its own pool's answers", async () => {
    assert.deepEqual(await ask('a'), { cache: 'miss', content: 'pool a' });
    assert.deepEqual(await ask('b'), { cache: 'miss', content: 'pool b' });
    assert.deepEqual(await ask('a'), { cache: 'hit', content: 'pool a' });
    assert.deepEqual(await ask('b'), { cache: 'hit', content: 'pool b' });
  });
});
