/**
 * An event stream's head comes before its queueing and prefill (vLLM sends it at once): the
 * time-to-first-byte deadline runs on until the first event, and the body-gap deadline starts only
 * then. A slow prefill within `ttfb_ms` is served however short `idle_ms` is; a stream whose first
 * event does not come within `ttfb_ms` is retried on another node, the client having seen nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const EVENT = 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n';

describe('the first event of a stream', { timeout: 30_000 }, () => {
  let slow: ScriptedNode | undefined;
  let mute: ScriptedNode | undefined;
  let t: TestSluice | undefined;
  const open = new Set<ServerResponse>();
  let muteCalls = 0;

  /** Sends the stream's head at once, its events after `delayMs` (never when < 0). */
  const streamer =
    (delayMs: number, onCall: () => void) =>
    (req: import('node:http').IncomingMessage, res: ServerResponse) => {
      req.resume();
      onCall();
      open.add(res);
      res.on('close', () => open.delete(res));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      if (delayMs < 0) return;
      const asked = req.headers['x-delay'];
      setTimeout(
        () => res.end(`${EVENT}${EVENT}data: [DONE]\n\n`),
        asked === undefined ? delayMs : Number(asked),
      );
    };

  before(async () => {
    slow = await startScriptedNode(streamer(800, () => {}));
    mute = await startScriptedNode(streamer(-1, () => muteCalls++));
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: slow
    nodes: [{ url: ${slow.url} }]
    timeouts: { ttfb_ms: 5000, idle_ms: 300 }
  - name: both
    nodes: [{ url: ${mute.url} }, { url: ${slow.url} }]
    timeouts: { ttfb_ms: 400, idle_ms: 5000 }
  - name: untimed
    nodes: [{ url: ${mute.url} }]
    timeouts: { ttfb_ms: 0, idle_ms: 300, total_ms: 10000 }
routes:
  - name: untimed
    match: { headers: { x-pool: untimed } }
    pool: untimed
  - name: slow
    match: { headers: { x-pool: slow } }
    pool: slow
  - name: both
    match: {}
    pool: both
    retries: { max: 1, on: [timeout], base_backoff_ms: 1, max_backoff_ms: 1 }
`);
  });

  after(async () => {
    for (const res of open) res.destroy();
    await t?.close();
    await slow?.close();
    await mute?.close();
  });

  it('may take up to ttfb_ms, whatever idle_ms says', async () => {
    const r = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest({ stream: true }, { 'x-pool': 'slow' }),
    );
    const text = await r.text();
    assert.equal(r.status, 200, text);
    assert.match(text, /data: \[DONE\]/);
    assert.doesNotMatch(text, /error/);
  });

  it('is waited for by idle_ms when the route has no ttfb_ms', async () => {
    const started = performance.now();
    const r = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest({ stream: true }, { 'x-pool': 'untimed' }),
    );
    const body = (await r.json()) as { error: { code: string } };
    assert.equal(r.status, 504);
    assert.equal(body.error.code, 'upstream_idle_timeout');
    assert.ok(performance.now() - started < 3000);
  });

  it('is retried on another node when it does not come within ttfb_ms', async () => {
    // Round-robin: of two requests, one goes to the mute node first.
    for (let i = 0; i < 2; i++) {
      const r = await fetch(
        `${t!.url}/v1/chat/completions`,
        chatRequest({ stream: true }, { 'x-delay': '0' }),
      );
      const text = await r.text();
      assert.equal(r.status, 200, text);
      assert.match(text, /data: \[DONE\]/);
    }
    assert.equal(muteCalls, 2);
  });
});
