/**
 * A tenant's `max_concurrent` limit through a real Sluice in front of a simulated node: requests
 * over the limit get 429 at once, and every way a request can end (streamed to its end, cut by the
 * client, an upstream error status, no node answering) gives its slot back.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-concurrency-0123456789';
const AUTH = { authorization: `Bearer ${KEY}` };
const SLOW_STREAM = { stream: true, max_tokens: 40 };
const SLOW_HEADERS = { ...AUTH, 'x-sim-chunk-delay-ms': '25' }; // about 1 s per stream

describe('per-tenant concurrency limit', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    const digest = createHash('sha256').update(KEY).digest('hex');
    t = await startTestSluice(
      basicConfig(
        fleet.urls,
        `tenants:\n  - name: a\n    keys: [{ sha256: ${digest} }]\n    limits: { max_concurrent: 2 }\n`,
      ),
    );
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  /** Status of a short request of the tenant, body read. */
  async function status(headers: Record<string, string> = {}): Promise<number> {
    const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}, { ...AUTH, ...headers }));
    await r.arrayBuffer();
    return r.status;
  }

  it('answers 429 over the limit and frees a slot however a request ends', async () => {
    const abort = new AbortController();
    const cut = await fetch(`${t.url}/v1/chat/completions`, {
      ...chatRequest(SLOW_STREAM, SLOW_HEADERS),
      signal: abort.signal,
    });
    const full = await fetch(`${t.url}/v1/chat/completions`, chatRequest(SLOW_STREAM, SLOW_HEADERS));
    assert.deepEqual([cut.status, full.status], [200, 200]);

    const over = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}, AUTH));
    assert.equal(over.status, 429);
    assert.match(over.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
    const body = (await over.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'rate_limit_exceeded');
    assert.match(body.error.message, /concurrent/);
    // No bucket was read for it: no x-ratelimit-* headers, and counted under its own error id.
    assert.equal(over.headers.get('x-ratelimit-limit-requests'), null);
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_downstream_rejected_total\{code="SLUICE_RATELIMIT_CONCURRENCY"\} 1\n/);
    assert.doesNotMatch(metrics, /code="SLUICE_RATELIMIT_REQUESTS"/);

    abort.abort();
    await cut.body?.cancel().catch(() => undefined);
    await waitFor(async () => (await status()) === 200, 3000, 'the slot of the cut stream');

    assert.equal(await full.text().then((text) => text.trimEnd().endsWith('data: [DONE]')), true);
    assert.equal(await status({ 'x-sim-status': '500' }), 500, 'an upstream error status');
    assert.equal(await status({ 'x-sim-drop-after': '0' }), 502, 'no node answered');

    // Both slots are free again: two streams at once are admitted.
    const again = await Promise.all([
      fetch(`${t.url}/v1/chat/completions`, chatRequest({ stream: true }, AUTH)),
      fetch(`${t.url}/v1/chat/completions`, chatRequest({ stream: true }, AUTH)),
    ]);
    assert.deepEqual(
      again.map((r) => r.status),
      [200, 200],
    );
    await Promise.all(again.map((r) => r.arrayBuffer()));
  });
});
