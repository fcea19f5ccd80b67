/**
 * A plugin's own answer after the tenant's limit check (a response-cache hit): it counts against
 * the tenant's requests_per_minute, carries the rate-limit headers, and a request id the plugin
 * sets replaces Sluice's instead of being sent beside it. A real Sluice, a real node behind it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { startRecordingNode, tenantsSection, type RecordingNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { rawRequest } from '../helpers/raw-http.js';

const ANSWER_PLUGIN = fileURLToPath(new URL('./fixtures/answer-plugin.js', import.meta.url));
const KEY = 'sk-plugin-answers-0123456789';

describe('plugin answers after the limit check', { timeout: 30_000 }, () => {
  let node: RecordingNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    node = await startRecordingNode(200, '{"choices":[]}');
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: answer
    use: ${ANSWER_PLUGIN}
pools:
  - { name: gpu, nodes: [{ url: ${node.url} }] }
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [answer]
${tenantsSection([{ name: 'acme', key: KEY, limits: '{ requests_per_minute: 2 }' }])}`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  function ask(headers: Record<string, string> = {}): Promise<Response> {
    return fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers },
      body: '{"model":"m","messages":[{"role":"user","content":"hi"}]}',
    });
  }

  it('counts each answer against requests_per_minute and sends the rate-limit headers', async () => {
    const first = await ask();
    assert.equal(first.status, 200);
    assert.equal(await first.text(), '{"answered":"by the plugin"}');
    assert.equal(first.headers.get('x-ratelimit-limit-requests'), '2');
    assert.equal(first.headers.get('x-ratelimit-remaining-requests'), '1');
    assert.equal((await ask()).status, 200);
    const third = await ask();
    assert.equal(third.status, 429, 'two answers used the two requests of the minute');
    assert.equal(node!.received.length, 0, 'no request reached the node');
  });

  it('sends the plugin’s request id alone', async () => {
    // Without tenants (the limit above is spent): the raw answer shows every header sent.
    await t!.close();
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: answer
    use: ${ANSWER_PLUGIN}
pools:
  - { name: gpu, nodes: [{ url: ${node!.url} }] }
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [answer]
`);
    const { response: r, conn } = await rawRequest(
      t.url,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nx-answer-id: mine-1\r\ncontent-length: 2\r\n\r\n{}`,
    );
    assert.equal(r.status, 200);
    conn.socket.destroy();
    assert.deepEqual(r.headers.get('x-request-id'), ['mine-1']);
  });
});
