/**
 * Time to first token is taken on the first SSE event Sluice forwards, not on the response head: a
 * node that sends its head at once and its first event later (as vLLM does while the prefill
 * queues) shows a short time to first byte and a long time to first token.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basicConfig, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const PREFILL_MS = 250;

describe('time to first token', { timeout: 30_000 }, () => {
  let node: Server | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    node = createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        if (!body.includes('"stream":true')) {
          setTimeout(() => {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end('{"choices":[{"message":{"content":"hi"}}]}');
          }, PREFILL_MS);
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.write(': queued\n\n');
        setTimeout(() => {
          res.write('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n');
          res.end('data: [DONE]\n\n');
        }, PREFILL_MS);
      });
    });
    await new Promise<void>((resolve) => node!.listen(0, '127.0.0.1', resolve));
    const port = (node.address() as AddressInfo).port;
    t = await startTestSluice(basicConfig([`http://127.0.0.1:${port}`]));
  });

  after(async () => {
    await t?.close();
    if (node !== undefined) await new Promise<void>((resolve) => node!.close(() => resolve()));
  });

  it('records the first event, not the head, as the time to first token of a stream', async () => {
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest({ stream: true }));
    assert.equal(r.status, 200);
    assert.match(await r.text(), /data: \[DONE\]/);
    const stats = [...t!.sluice.stats.routes.values()][0]!;
    assert.equal(stats.ttft.count, 1);
    const ttft = stats.ttft.percentileSeconds(50) * 1000;
    const ttfb = stats.ttfb.percentileSeconds(50) * 1000;
    assert.ok(ttft >= PREFILL_MS - 5 && ttft < PREFILL_MS + 200, `ttft ${ttft} ms`);
    assert.ok(ttfb < PREFILL_MS / 2, `the head came at once, ttfb ${ttfb} ms`);
    const metrics = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_time_to_first_token_seconds_count\{route="[^"]+"\} 1/);
  });

  it('records no time to first token for an answer that is not a stream', async () => {
    const stats = [...t!.sluice.stats.routes.values()][0]!;
    const before = stats.ttft.count;
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest({}));
    assert.equal(r.status, 200);
    assert.match(await r.text(), /"content":"hi"/);
    assert.equal(stats.ttft.count, before, 'a JSON answer has no first token of its own');
    assert.ok(stats.ttfb.count >= 2);
  });
});
