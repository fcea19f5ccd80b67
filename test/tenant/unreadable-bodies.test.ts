/**
 * A limited tenant cannot pass its token and model limits with a body Sluice cannot read but a
 * node can (Python servers accept a UTF-8 byte order mark, NaN and UTF-16): a byte order mark is
 * read past and charged like the plain body; other bodies that say they are JSON and are not are
 * refused with 400; bodies of other types (uploads, NDJSON) are forwarded. Against a scripted node over HTTP that answers every request.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startScriptedNode, tenantsSection, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-unreadable-0000000000000000000';
const ANSWER = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] });

describe('bodies a limited tenant sends that Sluice cannot read', { timeout: 60_000 }, () => {
  let node: ScriptedNode | null = null;
  let served = 0;
  let t: TestSluice | null = null;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        served++;
        // No usage: the tenant keeps the pre-debit.
        res.writeHead(200, { 'content-type': 'application/json' }).end(ANSWER);
      });
    });
    const url = node.url;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${url}
routes:
  - name: chat
    match: { path_prefix: /v1/ }
    pool: gpu
${tenantsSection([{ name: 'a', key: KEY, limits: '{ tokens_per_minute: 1000 }' }])}`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  function post(
    body: Buffer | string,
    type = 'application/json',
    path = '/v1/chat/completions',
  ): Promise<Response> {
    return fetch(`${t!.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': type, authorization: `Bearer ${KEY}` },
      body,
    });
  }

  const chat = (extra: string): string =>
    `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":900${extra}}`;

  it('charges a body with a UTF-8 byte order mark like the same body without it', async () => {
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(chat(''))]);
    const first = await post(bom);
    assert.equal(first.status, 200, await first.text());
    // 900 of the 1,000 tokens a minute are taken: a second such request does not fit.
    const second = await post(bom);
    assert.equal(second.status, 429, await second.text());
    assert.equal(second.headers.get('x-ratelimit-limit-tokens'), '1000');
  });

  for (const [what, body] of [
    ['NaN', Buffer.from(chat(',"temperature":NaN'))],
    ['UTF-16', Buffer.from(`\ufeff${chat('')}`, 'utf16le')],
    ['a cut document', Buffer.from(chat('').slice(0, 40))],
  ] as const) {
    it(`refuses a body that is not JSON (${what}) with 400 before any node sees it`, async () => {
      const before = served;
      const res = await post(body);
      assert.equal(res.status, 400);
      const err = (await res.json()) as { error: { type: string; message: string } };
      assert.equal(err.error.type, 'invalid_request_error');
      assert.match(err.error.message, /not valid JSON/);
      assert.equal(served, before);
    });
  }

  it('counts the refusals under invalid_request', async () => {
    const metrics = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_downstream_rejected_total\{code="SLUICE_DOWNSTREAM_INVALID_REQUEST"\} 3\n/);
  });

  it('forwards a body of another type (NDJSON), which says it is not one JSON document', async () => {
    const before = served;
    const res = await post('{"a":1}\n{"b":2}\n', 'application/x-ndjson', '/v1/other');
    assert.equal(res.status, 200, await res.text());
    assert.equal(served, before + 1);
  });

  it('forwards a form upload, which carries no JSON to count', async () => {
    const before = served;
    const res = await post(
      '--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n1\r\n--b--\r\n',
      'multipart/form-data; boundary=b',
      '/v1/audio/transcriptions',
    );
    assert.equal(res.status, 200, await res.text());
    assert.equal(served, before + 1);
  });
});
