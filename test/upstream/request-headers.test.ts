/**
 * A pool's `request_headers`: the credentials a node checks (vLLM's `--api-key`) go on every request
 * to it, replacing the client's header of that name, on plain and micro-batched routes alike;
 * `${env:NAME}` is read when the config loads (unset: refused); /admin/config shows no written value.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startRefused, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** The headers each request reached the node with, by path. */
const seen: { path: string; authorization: string | undefined; tier: string | undefined }[] = [];

function config(node: string, headers: string): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    request_headers: ${headers}
    nodes:
      - url: ${node}
routes:
  - name: embeddings
    match: { path: /v1/embeddings }
    pool: gpu
    batching: { mode: native, max_wait_ms: 1 }
  - name: all
    match: {}
    pool: gpu
`;
}

describe('pool request_headers', { timeout: 30_000 }, () => {
  let node: ScriptedNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    process.env['SLUICE_TEST_NODE_KEY'] = 'node-secret-123';
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push({
          path: req.url ?? '',
          authorization: req.headers['authorization'],
          tier: req.headers['x-node-tier'] as string | undefined,
        });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          req.url === '/v1/embeddings'
            ? '{"object":"list","data":[{"index":0,"embedding":[1]}],"usage":{"prompt_tokens":1,"total_tokens":1}}'
            : '{"id":"x","object":"chat.completion","choices":[]}',
        );
      });
    });
    t = await startTestSluice(
      config(node.url, '{ authorization: "Bearer ${env:SLUICE_TEST_NODE_KEY}", x-node-tier: gold }'),
    );
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  it("sends them on plain and batched requests, in place of the client's", async () => {
    seen.length = 0;
    const chat = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer client-key' },
      body: '{"model":"m","messages":[]}',
    });
    assert.equal(chat.status, 200);
    await chat.text();
    const embed = await fetch(`${t!.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer client-key' },
      body: '{"model":"e","input":"x"}',
    });
    assert.equal(embed.status, 200, await embed.text());
    assert.deepEqual(seen, [
      { path: '/v1/chat/completions', authorization: 'Bearer node-secret-123', tier: 'gold' },
      { path: '/v1/embeddings', authorization: 'Bearer node-secret-123', tier: 'gold' },
    ]);
  });

  it('masks written values and credential headers in /admin/config, and shows other environment references', async () => {
    const view = (await (await fetch(`${t!.adminUrl}/admin/config`)).json()) as {
      config: { pools: { request_headers: Record<string, string> }[] };
    };
    assert.deepEqual(view.config.pools[0]!.request_headers, {
      authorization: '****',
      'x-node-tier': '****',
    });
  });

  it('shows a reference to the environment under a name that is no credential', async () => {
    const other = await startTestSluice(config(node!.url, '{ x-node-tier: "${env:SLUICE_TEST_NODE_KEY}" }'));
    try {
      const view = (await (await fetch(`${other.adminUrl}/admin/config`)).json()) as {
        config: { pools: { request_headers: Record<string, string> }[] };
      };
      assert.deepEqual(view.config.pools[0]!.request_headers, {
        'x-node-tier': '${env:SLUICE_TEST_NODE_KEY}',
      });
    } finally {
      await other.close();
    }
  });

  it('refuses a config that reads an unset variable, or sets a header Sluice manages', async () => {
    const unset = await startRefused(
      config(node!.url, '{ authorization: "Bearer ${env:SLUICE_TEST_UNSET_KEY}" }'),
    );
    assert.match(
      unset.message,
      /request_headers\.authorization reads environment variable SLUICE_TEST_UNSET_KEY, which is not set/,
    );
    const managed = await startRefused(config(node!.url, '{ content-length: "5" }'));
    assert.match(managed.message, /request_headers/);
  });
});
