/**
 * A route whose plugins rewrite the answer (model-alias) does not pass the client's
 * Accept-Encoding to the node: a node that compresses when asked (most HTTP servers) answers in
 * plain text, which the plugin can rewrite. Before, the plugin read gzip bytes as text and the
 * client got a corrupt body (the SDK failed with `terminated`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { startScriptedNode, type ScriptedNode } from '../../test/helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

describe('model-alias with a node that compresses', { timeout: 30_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;
  const encodings: (string | undefined)[] = [];

  before(async () => {
    node = await startScriptedNode((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        const asked = req.headers['accept-encoding'];
        encodings.push(asked);
        const model = (JSON.parse(raw) as { model: string }).model;
        const body = JSON.stringify({ id: 'c', object: 'chat.completion', model, choices: [] });
        if (asked !== undefined && asked.includes('gzip')) {
          res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
          res.end(gzipSync(body));
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(body);
        }
      });
    });
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: alias
    use: model-alias
    options:
      aliases:
        - { public: gpt-fast, target: target-model }
pools:
  - name: gpu
    nodes:
      - url: ${node.url}
routes:
  - name: aliased
    match: { path: /v1/chat/completions, models: [gpt-fast] }
    pool: gpu
    plugins: [alias]
  - name: plain
    match: { path: /v1/chat/completions }
    pool: gpu
`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  const ask = (model: string): Promise<Response> =>
    fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip, deflate' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });

  it('asks the node for plain text and rewrites the model name in it', async () => {
    const r = await ask('gpt-fast');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-encoding'), null);
    const body = (await r.json()) as { model: string };
    assert.equal(body.model, 'gpt-fast');
    assert.equal(encodings.at(-1), undefined);
  });

  it('still passes Accept-Encoding on a route without such plugins', async () => {
    const r = await ask('other');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-encoding'), 'gzip');
    assert.equal(((await r.json()) as { model: string }).model, 'other');
    assert.equal(encodings.at(-1), 'gzip, deflate');
  });
});
