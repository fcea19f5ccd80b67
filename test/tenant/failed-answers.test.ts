/**
 * A tenant is not charged tokens for a node's error answer (a 400 such as "context length exceeded",
 * a 500) that reports no usage: the pre-debit is given back, so a failing fleet does not use up a
 * tenant's budget. A success without usage keeps its estimate. Against a scripted node over HTTP.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startScriptedNode, tenantsSection, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-failed-answers-000000000000000';
const KEY_B = 'sk-failed-answers-b00000000000000';

describe('token charges of error answers', { timeout: 60_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.headers['x-status'] === 'slow-stream') {
          // A stream that goes on for a while, without usage.
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const timer = setInterval(() => res.write('data: {"choices":[{"delta":{"content":"x"}}]}\n\n'), 20);
          res.on('close', () => clearInterval(timer));
          return;
        }
        const status = Number(req.headers['x-status'] ?? 200);
        const body =
          status === 200
            ? { id: 'x', object: 'chat.completion', choices: [] }
            : { error: { message: 'failed', type: 'invalid_request_error', code: null } };
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      });
    });
    const url = node.url;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${url}
routes:
  - name: chat
    match: { path: /v1/chat/completions }
    pool: gpu
    retries: { max: 0 }
${tenantsSection([
  { name: 'a', key: KEY, limits: '{ tokens_per_minute: 1000 }' },
  { name: 'b', key: KEY_B, limits: '{ tokens_per_minute: 1000 }' },
])}`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  function chat(status: number): Promise<Response> {
    return fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${KEY}`,
        'x-status': String(status),
      },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 400 }),
    });
  }

  it('gives back the pre-debit of 4xx and 5xx answers without usage, and keeps that of a success', async () => {
    // Four error answers of 400 estimated tokens each: 1,600 tokens, more than the 1,000 a minute.
    for (const status of [400, 500, 400, 500]) {
      const res = await chat(status);
      const text = await res.text();
      assert.equal(res.status, status, `the earlier error answers were charged: ${text}`);
    }
    const ok = await chat(200);
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    // The success keeps its 400-odd tokens: the next request no longer fits beside another.
    const left = Number((await chat(200)).headers.get('x-ratelimit-remaining-tokens'));
    assert.ok(left < 250, `${left} tokens left after two charged successes`);
  });

  it('keeps the charge of a stream the client left after its node answered 200', async () => {
    const ac = new AbortController();
    const res = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${KEY_B}`,
        'x-status': 'slow-stream',
      },
      body: JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 900,
        stream: true,
      }),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    await waitFor(() => t!.sluice.stats.inFlight === 0, 3000, 'the stream to end');
    // The node was generating: the left stream's 900-odd tokens stay charged, so 900 more do not fit.
    const next = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY_B}` },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 900 }),
    });
    assert.equal(next.status, 429, await next.text());
  });
});
