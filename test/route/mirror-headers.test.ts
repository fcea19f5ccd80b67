/**
 * What a shadow node receives: the shadow pool's own `request_headers` in place of the client's
 * (never the client's key, never the primary pool's), and the request as the route's plugins
 * left it (a header `header-rules` removes is removed from the copy too).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { LOOPBACK_HEAD, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';

/** A node recording the headers of each request and answering a small completion. */
async function startHeaderNode(seen: IncomingHttpHeaders[]): Promise<ScriptedNode> {
  return startScriptedNode((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id":"x","object":"chat.completion","choices":[]}');
    });
  });
}

describe('mirrored requests', { timeout: 30_000 }, () => {
  const primarySeen: IncomingHttpHeaders[] = [];
  const shadowSeen: IncomingHttpHeaders[] = [];
  let primary: ScriptedNode | undefined;
  let shadow: ScriptedNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    process.env['SLUICE_TEST_PRIMARY_KEY'] = 'primary-node-key';
    process.env['SLUICE_TEST_SHADOW_KEY'] = 'shadow-node-key';
    primary = await startHeaderNode(primarySeen);
    shadow = await startHeaderNode(shadowSeen);
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: strip
    use: header-rules
    options:
      request:
        remove: [x-internal-secret]
pools:
  - name: primary
    nodes: [{ url: ${primary.url} }]
    request_headers: { authorization: "Bearer \${env:SLUICE_TEST_PRIMARY_KEY}" }
  - name: shadow
    nodes: [{ url: ${shadow.url} }]
    request_headers: { authorization: "Bearer \${env:SLUICE_TEST_SHADOW_KEY}" }
routes:
  - name: chat
    match: {}
    pool: primary
    mirror: { pool: shadow, percent: 100 }
    plugins: [strip]
`);
  });

  after(async () => {
    await t?.close();
    await primary?.close();
    await shadow?.close();
  });

  it("carry the shadow pool's key and the headers the plugins left, never the client's key", async () => {
    const r = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest(
        {},
        { authorization: 'Bearer client-secret-key', 'x-internal-secret': 's3', 'x-kept': 'yes' },
      ),
    );
    assert.equal(r.status, 200);
    await r.text();
    await waitFor(() => shadowSeen.length === 1, 5000, 'the shadow copy');
    assert.equal(primarySeen.length, 1);
    assert.equal(primarySeen[0]!.authorization, 'Bearer primary-node-key');
    const copy = shadowSeen[0]!;
    assert.equal(copy.authorization, 'Bearer shadow-node-key');
    assert.equal(copy['x-internal-secret'], undefined);
    assert.equal(copy['x-kept'], 'yes');
    assert.equal(primarySeen[0]!['x-internal-secret'], undefined);
  });
});
