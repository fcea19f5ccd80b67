/**
 * A node that ends a stream's events with `data: [DONE]` and then keeps the body open (or breaks
 * the connection) has answered: the client's stream ends after `[DONE]` without an error event,
 * and the node is not charged a failure. A stream that stalls before `[DONE]` still ends with the
 * error event, also when the node names its type in upper case. Against a scripted node over HTTP.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN } from '../plugin/plugin-helpers.js';

const EVENT = 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n';

describe('a node that lingers after [DONE]', { timeout: 60_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;
  const open = new Set<ServerResponse>();

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        const shape = req.headers['x-shape'];
        // Media types are case-insensitive: a stream is a stream whatever the case of its type.
        res.writeHead(200, {
          'content-type': shape === 'upper-case-stall' ? 'Text/Event-Stream' : 'text/event-stream',
        });
        open.add(res);
        res.on('close', () => open.delete(res));
        if (shape === 'stall-before-done' || shape === 'upper-case-stall') {
          res.write(EVENT);
          return;
        }
        res.write(`${EVENT}${EVENT}data: [DONE]\n\n`);
        if (shape === 'reset-after-done') setTimeout(() => res.socket?.destroy(), 50);
        // 'linger': the body stays open until the test ends.
      });
    });
    const url = node.url;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${url}
    timeouts: { idle_ms: 300 }
plugins:
  - name: slow
    use: ${PROBE_PLUGIN}
    timeout_ms: 100
    options: { fail_phase: onResponseChunk, fail_how: hang, fail_after_chunks: 1 }
routes:
  - name: plugged
    match: { path: /v1/chat/completions, headers: { x-plugin: slow } }
    pool: gpu
    plugins: [slow]
  - name: chat
    match: { path: /v1/chat/completions }
    pool: gpu
`);
  });

  after(async () => {
    await t?.close();
    for (const res of open) res.destroy();
    await node?.close();
  });

  const gpu = (): UpstreamNode => t!.sluice.current.pools.get('gpu')!.members[0]!.node;

  async function stream(shape: string): Promise<string> {
    const res = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-shape': shape },
      signal: AbortSignal.timeout(5000),
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    assert.equal(res.status, 200);
    return res.text();
  }

  for (const shape of ['linger', 'reset-after-done']) {
    it(`ends the stream after [DONE] without an error event and charges the node nothing (${shape})`, async () => {
      const failures = gpu().failures;
      const text = await stream(shape);
      assert.ok(
        text.endsWith('data: [DONE]\n\n'),
        `the stream ended with ${JSON.stringify(text.slice(-80))}`,
      );
      assert.doesNotMatch(text, /"error"/);
      assert.equal(gpu().failures - failures, 0);
    });
  }

  for (const shape of ['stall-before-done', 'upper-case-stall']) {
    it(`still ends a stream that stalls before [DONE] with the error event, charged to the node (${shape})`, async () => {
      const failures = gpu().failures;
      const text = await stream(shape);
      assert.match(text, /\n\ndata: \{"error":.*upstream_idle_timeout/);
      assert.equal(gpu().failures - failures, 1);
    });
  }

  it('ends with the plugin error when a plugin fails on a stream whose node already sent [DONE]', async () => {
    // What the client got is what the plugin passed on, not the node's [DONE]: the request must
    // end as the plugin's failure (it hung before: neither a clean end nor an error came).
    const res = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-shape': 'reset-after-done', 'x-plugin': 'slow' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
      signal: AbortSignal.timeout(5000),
    });
    // A 500 before the first byte went out, else an error event: either way the plugin's error.
    assert.match(await res.text(), /plugin_error/);
    assert.equal(t!.sluice.stats.inFlight, 0);
  });
});
