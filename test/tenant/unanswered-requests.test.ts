/**
 * A request sent to a node that never answered (the connection reset, the head timed out) counts
 * against the tenant's `requests_per_minute`, with no tokens charged: a failing fleet must not
 * lift the limit. A request admission turned away before dispatch is still given back.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startScriptedNode, tenantsSection, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-unanswered-requests-0000000000';

describe('requests no node answered', { timeout: 30_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;
  let received = 0;

  before(async () => {
    node = await startScriptedNode((req) => {
      req.resume();
      req.on('end', () => {
        received++;
        if (req.headers['x-mode'] === 'reset') req.socket.destroy();
        // 'stall': never answers; Sluice's ttfb_ms ends it.
      });
    });
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${node.url}
    timeouts: { ttfb_ms: 200 }
routes:
  - name: chat
    match: { path: /v1/chat/completions }
    pool: gpu
    retries: { max: 0 }
${tenantsSection([{ name: 'a', key: KEY, limits: '{ requests_per_minute: 4, tokens_per_minute: 1000 }' }])}`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  async function chat(mode: string): Promise<{ status: number; code: string | undefined }> {
    const res = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'x-mode': mode },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 400 }),
    });
    const body = (await res.json()) as { error?: { code?: string } };
    return { status: res.status, code: body.error?.code };
  }

  it('counts them against requests_per_minute and charges them no tokens', async () => {
    // Four requests of 400 estimated tokens each (1,600 > 1,000 a minute), none answered: each is
    // sent, and each keeps its request (the limit is 4) but not its tokens.
    const seen = [];
    for (const mode of ['reset', 'stall', 'reset', 'stall']) seen.push((await chat(mode)).status);
    assert.deepEqual(seen, [502, 504, 502, 504], 'the tokens of unanswered requests were charged');
    assert.equal(received, 4);
    // The fifth finds the request limit used up, and reaches no node.
    const fifth = await chat('reset');
    assert.equal(fifth.status, 429);
    assert.equal(received, 4);
  });
});
