/**
 * onDone on a micro-batched route sees the answer's usage and its time to first byte, as on a
 * route whose requests go one by one (it saw usage null and ttfbMs -1). A real Sluice in front of
 * a real simulated node.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { chatRequest, LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import type { DoneRecord } from './fixtures/done-recorder-plugin.js';

const RECORDER = fileURLToPath(new URL('./fixtures/done-recorder-plugin.js', import.meta.url));

function records(): DoneRecord[] {
  return ((globalThis as { __doneRecords?: DoneRecord[] }).__doneRecords ??= []);
}

describe('onDone on a micro-batched route', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: recorder
    use: ${RECORDER}
pools:
  - { name: gpu, nodes: [{ url: ${fleet.urls[0]} }] }
routes:
  - name: chat
    match: { path: /v1/chat/completions, methods: [POST] }
    pool: gpu
    plugins: [recorder]
    batching: { mode: fanout, max_batch_size: 4, max_wait_ms: 10 }
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('sees the usage and the time to first byte of the batched answer', async () => {
    records().length = 0;
    const answers = await Promise.all(
      [1, 2, 3].map(async () => {
        const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
        assert.equal(r.status, 200);
        return (await r.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
      }),
    );
    await waitFor(() => records().length === 3, 5_000, 'three onDone calls');
    for (const rec of records()) {
      assert.equal(rec.status, 200);
      assert.ok(rec.usage !== null, 'usage seen');
      assert.ok(rec.usage.total > 0);
      assert.ok(rec.ttfbMs >= 0, `ttfbMs ${rec.ttfbMs}`);
    }
    const sent = answers.map((a) => a.usage.prompt_tokens + a.usage.completion_tokens).sort();
    assert.deepEqual(
      records()
        .map((r) => r.usage!.total)
        .sort(),
      sent,
    );
  });
});
