/**
 * A retryable answer (a 500) whose body trickles or stalls does not hold the retry back: its body
 * is read for a moment only, then the exchange is cut and the request goes to another node at
 * once, instead of after the idle or total timeout.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

describe('a retryable answer with a slow body', { timeout: 30_000 }, () => {
  let bad: ScriptedNode | undefined;
  let good: ScriptedNode | undefined;
  let t: TestSluice | undefined;
  const open = new Set<ServerResponse>();
  let badCalls = 0;

  before(async () => {
    bad = await startScriptedNode((req, res) => {
      req.resume();
      badCalls++;
      open.add(res);
      res.on('close', () => open.delete(res));
      res.writeHead(500, { 'content-type': 'application/json' });
      if (req.headers['x-mode'] === 'trickle') {
        // One byte every 100 ms, for ever: the body never ends and is never idle for long.
        const timer = setInterval(() => res.write(' '), 100);
        res.on('close', () => clearInterval(timer));
      } else res.write('{"error":');
    });
    good = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"id":"ok","object":"chat.completion","choices":[]}');
      });
    });
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${bad.url}
      - url: ${good.url}
    health: { outlier: { consecutive_failures: 0 } }
    timeouts: { idle_ms: 20000, total_ms: 25000 }
routes:
  - name: chat
    match: {}
    pool: gpu
    retries: { max: 1, base_backoff_ms: 1, max_backoff_ms: 1 }
`);
  });

  after(async () => {
    for (const res of open) res.destroy();
    await t?.close();
    await bad?.close();
    await good?.close();
  });

  for (const mode of ['trickle', 'stall']) {
    it(`retries on another node at once when the body ${mode === 'trickle' ? 'trickles' : 'stalls'}`, async () => {
      const before = badCalls;
      // Round-robin over two nodes: of two requests, one goes to the failing node first.
      for (let i = 0; i < 2; i++) {
        const started = performance.now();
        const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest({}, { 'x-mode': mode }));
        const body = await r.text();
        const ms = performance.now() - started;
        assert.equal(r.status, 200, body);
        assert.ok(ms < 2000, `answered after ${ms.toFixed(0)} ms`);
      }
      assert.equal(badCalls - before, 1);
    });
  }
});
