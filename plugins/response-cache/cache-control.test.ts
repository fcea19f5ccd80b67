/**
 * response-cache and Cache-Control, through a real Sluice and a scripted node: an answer the node
 * marks `no-store` or `private` is not stored (a shared cache, RFC 9111 §5.2.2), and a
 * client's `max-age=0` is sent to the node like `no-cache` (RFC 9111 §5.2.1.1), its answer stored.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';
import { startScriptedNode, type ScriptedNode } from '../../test/helpers/scripted-node.js';

describe('response-cache honours Cache-Control', { timeout: 30_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;
  /** Requests the node answered. */
  let answered = 0;

  before(async () => {
    // The node sends back, as Cache-Control, the `x-node-cache-control` request header.
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        answered++;
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        const cc = req.headers['x-node-cache-control'];
        if (typeof cc === 'string') headers['cache-control'] = cc;
        res.writeHead(200, headers);
        res.end(
          JSON.stringify({
            id: `chatcmpl-${answered}`,
            object: 'chat.completion',
            created: 0,
            model: 'm',
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: `answer ${answered}` },
                finish_reason: 'stop',
              },
            ],
            usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
          }),
        );
      });
    });
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - { name: cache, use: response-cache, options: { ttl_ms: 60000 } }
pools:
  - name: gpu
    nodes:
      - url: ${node.url}
routes:
  - { name: all, match: {}, pool: gpu, plugins: [cache] }
`);
  });
  after(async () => {
    await t?.close();
    await node?.close();
  });

  async function ask(content: string, headers: Record<string, string> = {}): Promise<string | null> {
    const r = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], temperature: 0 }),
    });
    assert.equal(r.status, 200);
    await r.text();
    return r.headers.get('x-sluice-cache');
  }

  it('stores an answer the node lets a shared cache store', async () => {
    assert.equal(await ask('plain', { 'x-node-cache-control': 'max-age=60' }), 'miss');
    assert.equal(await ask('plain'), 'hit');
  });

  for (const cc of ['no-store, private', 'no-store', 'private', 'Private', 'private="set-cookie"']) {
    it(`does not store an answer marked Cache-Control: ${cc}`, async () => {
      const content = `marked ${cc}`;
      assert.equal(await ask(content, { 'x-node-cache-control': cc }), 'miss');
      const before = answered;
      assert.equal(await ask(content), 'miss');
      assert.equal(answered, before + 1, 'the node answered again');
    });
  }

  it("sends a client's max-age=0 to the node like no-cache and stores the fresh answer", async () => {
    assert.equal(await ask('max-age'), 'miss');
    assert.equal(await ask('max-age'), 'hit');
    const before = answered;
    assert.equal(await ask('max-age', { 'cache-control': 'max-age=0' }), 'miss');
    assert.equal(answered, before + 1, 'the node answered');
    assert.equal(await ask('max-age'), 'hit');
  });
});
