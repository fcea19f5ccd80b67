/**
 * Least-response-time against simulated nodes whose stream heads come at once (as vLLM's do): the
 * response head says nothing of the GPU, so the policy must learn each node's speed from the first
 * tokens. A node whose prefill is four times slower must be seen as such within 50 requests and
 * then get at most a third of the fast node's picks under steady load. Real Sluice, real nodes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadSimProfile } from '../../loadtest/sim/profile-loader.js';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, findNode, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

/** Prompt of about 2,000 tokens (4 characters each), unique per request so no prefix is cached. */
function prompt(i: number): string {
  return `request ${i} ${'lorem ipsum dolor sit amet '.repeat(296)}`;
}

/** Sends `count` streamed chats through `url`, `concurrency` at a time; resolves when all are read. */
async function closedLoop(url: string, first: number, count: number, concurrency: number): Promise<void> {
  let next = first;
  const end = first + count;
  const worker = async (): Promise<void> => {
    while (next < end) {
      const i = next++;
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim-chat',
          stream: true,
          max_tokens: 4,
          messages: [{ role: 'user', content: prompt(i) }],
        }),
      });
      const text = await r.text();
      assert.equal(r.status, 200, text);
      assert.match(text, /data: \[DONE\]/);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

describe('least-response-time on a node with a 4x slower prefill', { timeout: 120_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;
  let fast: UpstreamNode;
  let slow: UpstreamNode;

  before(async () => {
    // The test profile's mechanics with a prefill that costs something: 2,000 tokens take 200 ms on
    // the fast node and 800 ms on the slow one (speed factor 0.25); heads are sent at once.
    const profile = {
      ...loadSimProfile('fast'),
      prefill_fixed_ms: 2,
      prefill_tokens_per_s: 10_000,
      decode_base_ms: 1,
      stream_head: 'immediate' as const,
    };
    fleet = await startSimFleet({ nodes: 2, profile, speedFactors: [1, 0.25] });
    t = await startTestSluice(
      basicConfig(fleet.urls, '', { pool: '    balance: { kind: least-response-time }' }),
    );
    fast = findNode(t, fleet.urls[0]!)!;
    slow = findNode(t, fleet.urls[1]!)!;
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('learns the slow node’s rate within 50 requests, then sends it at most a third of the fast node’s picks', async () => {
    await closedLoop(t!.url, 0, 50, 6);
    const fastRate = fast.timing.ttftRate.perUnit();
    const slowRate = slow.timing.ttftRate.perUnit();
    assert.ok(fastRate > 0 && slowRate > 0, `both nodes sampled: ${fastRate}, ${slowRate}`);
    assert.ok(slowRate >= 3 * fastRate, `learned ms/token: slow ${slowRate} vs fast ${fastRate}`);
    // The streams' heads came at once: the head times alone could not tell the nodes apart (a
    // 2,000-token prompt's prefill at the slow node's learned rate is several times its head time).
    assert.ok(slow.ttfbEwmaMs < 0.5 * slowRate * 2000, `head ${slow.ttfbEwmaMs} ms, rate ${slowRate}`);

    const fastBefore = fast.attempts;
    const slowBefore = slow.attempts;
    await closedLoop(t!.url, 50, 150, 6);
    const fastPicks = fast.attempts - fastBefore;
    const slowPicks = slow.attempts - slowBefore;
    assert.equal(fastPicks + slowPicks, 150);
    assert.ok(slowPicks <= fastPicks / 3, `picks: slow ${slowPicks}, fast ${fastPicks}`);
    assert.equal(fast.timing.pendingCount + slow.timing.pendingCount, 0, 'every prefill settled');
  });
});
