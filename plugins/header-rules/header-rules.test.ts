/**
 * header-rules through a real Sluice: request headers set (with the tenant, the request id and an
 * environment value), removed and renamed on the way to the node (seen by a real HTTP upstream that
 * echoes what it received), response headers set, removed and renamed on the way back, by plain
 * HTTP and by the official OpenAI SDK.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { LOOPBACK_HEAD, startRefused, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

function config(node: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: headers
    use: header-rules
    options:
      request:
        set: { x-tenant-name: "\${tenant}", x-trace: "req-\${request_id}", x-region: "\${env:SLUICE_TEST_REGION}" }
        remove: [x-debug]
        rename: { x-old: x-new }
      response:
        set: { x-served-by: "sluice/\${route}" }
        remove: [x-internal]
        rename: { x-node-name: x-backend }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: chat
    match: {}
    pool: gpu
    plugins: [headers]
tenants:
  - name: acme
    keys: [{ env: SLUICE_TEST_ACME_KEY }]
`;
}

describe('header-rules', { timeout: 30_000 }, () => {
  let upstream: Server | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    process.env['SLUICE_TEST_REGION'] = 'eu-west';
    process.env['SLUICE_TEST_ACME_KEY'] = 'sk-acme-headers';
    // A node that answers with the headers it received, and headers of its own.
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, {
          'content-type': 'application/json',
          'x-internal': 'secret',
          'x-node-name': 'n1',
        });
        res.end(JSON.stringify(req.headers));
      });
    });
    await new Promise<void>((r) => upstream!.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as AddressInfo).port;
    t = await startTestSluice(config(`http://127.0.0.1:${port}`));
  });
  after(async () => {
    await t?.close();
    await new Promise((r) => (upstream === null ? r(null) : upstream.close(r)));
  });

  it('rewrites request headers on the way to the node and response headers on the way back', async () => {
    const r = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer sk-acme-headers',
        'content-type': 'application/json',
        'x-debug': '1',
        'x-old': 'moved',
      },
      body: '{}',
    });
    assert.equal(r.status, 200);
    const seen = (await r.json()) as Record<string, string>;
    const id = r.headers.get('x-request-id')!;
    assert.equal(seen['x-tenant-name'], 'acme');
    assert.equal(seen['x-trace'], `req-${id}`);
    assert.equal(seen['x-region'], 'eu-west');
    assert.equal(seen['x-debug'], undefined);
    assert.equal(seen['x-old'], undefined);
    assert.equal(seen['x-new'], 'moved');
    assert.equal(r.headers.get('x-served-by'), 'sluice/chat');
    assert.equal(r.headers.get('x-internal'), null);
    assert.equal(r.headers.get('x-node-name'), null);
    assert.equal(r.headers.get('x-backend'), 'n1');
  });

  it('gives an OpenAI SDK client the rewritten response headers and the node the tenant it resolved', async () => {
    const client = new OpenAI({ baseURL: `${t!.url}/v1`, apiKey: 'sk-acme-headers', maxRetries: 0 });
    const { data, response } = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    // The node echoes the headers it received as the JSON body.
    const seen = data as unknown as Record<string, string>;
    assert.equal(seen['x-tenant-name'], 'acme');
    assert.equal(seen['x-trace'], `req-${response.headers.get('x-request-id')}`);
    assert.equal(response.headers.get('x-served-by'), 'sluice/chat');
    assert.equal(response.headers.get('x-backend'), 'n1');
    assert.equal(response.headers.get('x-internal'), null);
  });

  it('refuses a config whose rules touch a header Sluice manages, naming the rule', async () => {
    for (const [rules, message] of [
      [
        'request:\n        set: { connection: close }',
        /request\.set: header connection is managed by Sluice/,
      ],
      [
        'response:\n        remove: [content-length]',
        /response\.remove: header content-length is managed by Sluice/,
      ],
      [
        'request:\n        rename: { x-a: transfer-encoding }',
        /request\.rename: header transfer-encoding is managed/,
      ],
      [
        'response:\n        set: { x-note: "caf\u00e9 \u2615" }',
        /response\.set: header x-note: the value must be a byte string/,
      ],
      [
        'response:\n        set: { date: "Thu, 01 Jan 1970 00:00:00 GMT" }',
        /response\.set: header date is written by the server/,
      ],
    ] as const) {
      const yaml = `${LOOPBACK_HEAD}plugins:
  - name: headers
    use: header-rules
    options:
      ${rules}
pools:
  - name: gpu
    nodes:
      - url: http://127.0.0.1:9
routes:
  - name: chat
    match: {}
    pool: gpu
    plugins: [headers]
`;
      assert.match((await startRefused(yaml)).message, message);
    }
  });
});
