/**
 * A tenant is charged the usage a node reports at the end of a stream however the stream's end is
 * cut into reads: keep-alive comments after the usage event (sse-starlette's pings) and a usage
 * event that arrives a few bytes at a time. Against a scripted node over HTTP.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startScriptedNode, tenantsSection, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-stream-usage-0000000000000000';
const REPORTED = 2500;
const USAGE_EVENT = `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":500,"completion_tokens":2000,"total_tokens":${REPORTED}}}\n\n`;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Writes `parts` one by one, each in its own TCP segment (a pause between writes). */
async function trickle(res: import('node:http').ServerResponse, parts: readonly string[]): Promise<void> {
  for (const p of parts) {
    res.write(p);
    await sleep(3);
  }
  res.end();
}

describe('token usage at the end of a stream', { timeout: 60_000 }, () => {
  let node: ScriptedNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const first = 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n';
        const parts =
          req.headers['x-shape'] === 'split'
            ? [first, ...USAGE_EVENT.match(/[\s\S]{1,4}/g)!, 'data: [DONE]\n\n']
            : [first, USAGE_EVENT, ': ping\n\n', ': ping\n\n', ': ping\n\n', 'data: [DONE]\n\n'];
        void trickle(res, parts);
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
${tenantsSection([{ name: 'a', key: KEY, limits: '{ tokens_per_minute: 10000 }' }])}`);
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  /** Remaining tokens after one more stream of the given shape, from the next answer's headers. */
  async function charge(shape: string): Promise<number> {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
      stream: true,
    });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'x-shape': shape };
    const before = await fetch(`${t!.url}/v1/chat/completions`, { method: 'POST', headers, body });
    const left = Number(before.headers.get('x-ratelimit-remaining-tokens'));
    assert.match(await before.text(), /data: \[DONE\]/);
    return left;
  }

  for (const shape of ['pings', 'split']) {
    it(`charges the reported usage (${shape === 'pings' ? 'keep-alive comments after it' : 'the usage event in 4-byte reads'})`, async () => {
      const a = await charge(shape);
      const b = await charge(shape);
      // Each answer's header shows the budget after its own pre-debit (a few tokens, max_tokens 4);
      // the difference between two is what the first stream was settled at, less what the bucket
      // refilled in between (10,000 a minute: under 20 tokens in 100 ms).
      const settled = a - b;
      assert.ok(
        settled > REPORTED - 60 && settled < REPORTED + 60,
        `the stream was charged ${settled} tokens; the node reported ${REPORTED}`,
      );
    });
  }
});
