/**
 * Least response time: the shared conformance suite, then its scoring by expected time to first
 * token: the prefill queue and the request's own prompt at each node's learned rate, a fair start
 * for unprobed nodes, stale rates fading, the scraped waiting count of other instances' traffic,
 * head times when no stream was seen, weights, and the estimate written for `x-sluice-route`.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createLeastResponseTime } from '../../proxy/balance/least-response-time.js';
import type { BalancePolicy, PoolMember } from '../../proxy/balance/balance-policy.js';
import { FIXED_WORK_TOKENS, chargePrefill, recordFirstToken } from '../../proxy/balance/node-timing.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { runPolicyConformance } from './conformance.js';
import { ClosedLoop, TestFleet, request, shares } from './fleet.js';

runPolicyConformance('least-response-time', createLeastResponseTime);

const fleet = new TestFleet();
afterEach(() => fleet.close());

const H = 10_000;

/** Gives `node` a learned rate of `msPerToken` from streamed first tokens, last sampled at `atMs`. */
function rated(node: UpstreamNode, msPerToken: number, atMs = 1000): void {
  node.timing.ttftRate.reset();
  node.timing.ttftRate.add(msPerToken * 1000, 1000, atMs, H);
}

function pickIndex(policy: BalancePolicy, ms: readonly PoolMember[], prompt = 1000): number {
  const picked = policy.pick(request(null, prompt + 100, prompt), []);
  return ms.findIndex((m) => m.node === picked);
}

describe('least-response-time policy', () => {
  it('reports its YAML kind and that it scores the prefill queue', () => {
    const p = createLeastResponseTime(fleet.members(1), {});
    assert.equal(p.kind, 'least-response-time');
    assert.equal(p.scoresPrefill, true);
  });

  it('sends every request to the fastest node while the queues are equal', () => {
    const ms = fleet.members(1, 1, 1);
    rated(ms[0]!.node, 0.2);
    rated(ms[1]!.node, 0.05);
    rated(ms[2]!.node, 0.12);
    const policy = createLeastResponseTime(ms, {});
    for (let i = 0; i < 20; i++) assert.equal(pickIndex(policy, ms), 1);
  });

  it('scores rate × (queued prefill + own prompt + fixed work) and reports the estimate', () => {
    const ms = fleet.members(1, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.4);
    const policy = createLeastResponseTime(ms, { queueWeight: 1 });
    const req = request(null, 1100, 1000);
    assert.equal(policy.pick(req, []), ms[0]!.node);
    assert.equal(req.expectedTtftMs, 0.1 * (1000 + FIXED_WORK_TOKENS));
    // 0.1 × (3000 + 1128) = 412.8 < 0.4 × 1128 = 451.2: still the fast node.
    chargePrefill(ms[0]!.node, 3000);
    assert.equal(policy.pick(req, []), ms[0]!.node);
    // 0.1 × (4000 + 1128) = 512.8 > 451.2: the slow, idle node now starts the prefill sooner.
    chargePrefill(ms[0]!.node, 1000);
    assert.equal(policy.pick(req, []), ms[1]!.node);
    assert.equal(req.expectedTtftMs, 0.4 * (1000 + FIXED_WORK_TOKENS));
  });

  it('counts queued work queueWeight times in the score (4 by default) and reports the estimate unweighted', () => {
    const ms = fleet.members(1, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.4);
    const policy = createLeastResponseTime(ms, {});
    const req = request(null, 1100, 1000);
    // 0.1 × (4 × 800 + 1128) = 432.8 < 0.4 × 1128 = 451.2: the fast node, estimate 0.1 × (800 + 1128).
    chargePrefill(ms[0]!.node, 800);
    assert.equal(policy.pick(req, []), ms[0]!.node);
    assert.ok(Math.abs(req.expectedTtftMs - 0.1 * (800 + 1000 + FIXED_WORK_TOKENS)) < 1e-9);
    // 0.1 × (4 × 1000 + 1128) = 512.8 > 451.2: the idle slow node, where weight 1 keeps the fast one.
    chargePrefill(ms[0]!.node, 200);
    assert.equal(policy.pick(req, []), ms[1]!.node);
    assert.equal(createLeastResponseTime(ms, { queueWeight: 1 }).pick(req, []), ms[0]!.node);
    // A weight below 1 is not a weight the score can take: the default stands.
    assert.equal(createLeastResponseTime(ms, { queueWeight: 0.5 }).pick(req, []), ms[1]!.node);
  });

  it('ignores answers being decoded: in-flight work without a queued prefill does not count', () => {
    const ms = fleet.members(1, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.1);
    ms[0]!.node.inFlight = 40;
    ms[0]!.node.inFlightCost = 40 * 1500;
    chargePrefill(ms[1]!.node, 2000);
    assert.equal(pickIndex(policy(ms), ms), 0);
  });

  it('counts the KV cache a node lacks for the request, beside its answers in flight, as queued work', () => {
    const ms = fleet.members(1, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.1);
    const p = createLeastResponseTime(ms, { cacheTokens: 100_000 });
    // 99,000 tokens in flight + 1,100 for the request: 100 short of 100,000, queued work 100 < 2,000.
    ms[0]!.node.inFlightCost = 99_000;
    chargePrefill(ms[1]!.node, 2000);
    const req = request(null, 1100, 1000);
    assert.equal(p.pick(req, []), ms[0]!.node);
    assert.equal(req.expectedTtftMs, 0.1 * (100 + 1000 + FIXED_WORK_TOKENS));
    // 3,000 short: more than the other node's queue.
    ms[0]!.node.inFlightCost = 101_900;
    assert.equal(pickIndex(p, ms), 1);
  });

  it('sends a node with a 4x slower prefill at most a third of a fast node’s picks under steady load', () => {
    const ms = fleet.members(1, 1, 1);
    rated(ms[0]!.node, 0.05);
    rated(ms[1]!.node, 0.05);
    rated(ms[2]!.node, 0.2);
    const counts = shares(policy(ms), ms, 6000, new ClosedLoop(24), 2000);
    const fast = (counts[0]! + counts[1]!) / 2;
    assert.ok(counts[2]! <= fast / 3, `slow ${counts[2]} vs fast ${fast}`);
    assert.ok(counts[2]! > 0, 'the slow node still takes the overflow');
  });

  it('counts waiting requests another instance sent, from the scraped gauge, at the mean prompt size', () => {
    const ms = fleet.members(1, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.1);
    const p = policy(ms);
    assert.equal(pickIndex(p, ms, 1000), 0); // mean prompt 1000 tokens
    ms[0]!.node.scrapedWaiting = 3;
    assert.equal(pickIndex(p, ms, 1000), 1);
    // The gauge counted two of this instance's own attempts when it was read: one foreign request.
    ms[0]!.node.timing.pendingAtScrape = 2;
    chargePrefill(ms[1]!.node, 1500);
    assert.equal(pickIndex(p, ms, 1000), 0);
  });

  it('scores an unprobed node with the pool reference rate (a fair start)', () => {
    const ms = fleet.members(1, 1, 1);
    rated(ms[0]!.node, 0.05);
    rated(ms[1]!.node, 0.15);
    const p = policy(ms); // node 2 unprobed: 0.1 ms per token
    assert.equal(pickIndex(p, ms), 0);
    chargePrefill(ms[0]!.node, 1200); // 0.05 × 2328 = 116 > 0.1 × 1128
    assert.equal(pickIndex(p, ms), 2);
  });

  it('balances by queued prefill work alone while no node has a sample, and reports no estimate', () => {
    const ms = fleet.members(1, 1, 1);
    chargePrefill(ms[0]!.node, 3000);
    chargePrefill(ms[2]!.node, 1000);
    const req = request(null, 1000, 900);
    assert.equal(policy(ms).pick(req, []), ms[1]!.node);
    assert.equal(req.expectedTtftMs, -1);
  });

  it('uses head times of answers that are not streamed when no stream was sampled', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.timing.headRate.add(4000, 1000, 1000, H);
    ms[1]!.node.timing.headRate.add(1000, 1000, 1000, H);
    assert.equal(pickIndex(policy(ms), ms), 1);
    // Once a stream is sampled anywhere, the stream series decides (node 1 unprobed there: the reference).
    rated(ms[0]!.node, 0.01);
    assert.equal(pickIndex(policy(ms), ms), 0);
  });

  it('probes again a node whose slow rate has gone stale while others kept answering', () => {
    const ms = fleet.members(1, 1);
    const p = createLeastResponseTime(ms, { decayMs: 10_000 });
    rated(ms[0]!.node, 0.05, 100_000);
    rated(ms[1]!.node, 1, 100_000);
    chargePrefill(ms[0]!.node, 1000); // 0.05 × 2128 = 106 against 1 × 1128
    assert.equal(pickIndex(p, ms), 0);
    // Ten half-lives older than the newest sample: the slow rate has faded toward the reference
    // (~0.051), so the busy fast node now loses to it.
    rated(ms[1]!.node, 1, 0);
    assert.equal(pickIndex(p, ms), 1);
  });

  it('does not take a node that prefilled queued prompts together for a faster one', () => {
    // Two nodes of one speed: time to first token = 30 ms + 0.02 ms per token of work ahead and own.
    // Node 0 got requests in pairs (the second found the first's work ahead of it), node 1 one at a
    // time. A rate learned as throughput reads node 0 as faster (two first tokens per step); the
    // line fitted to latency against work ahead reads both alike.
    const ms = fleet.members(1, 1);
    const [a, b] = [ms[0]!.node, ms[1]!.node];
    let t = 1000;
    for (let i = 0; i < 16; i++) {
      const own = 400 + 150 * (i % 8);
      const first = chargePrefill(a, own);
      const second = chargePrefill(a, own);
      const both = 30 + 0.02 * (2 * own + FIXED_WORK_TOKENS);
      recordFirstToken(a, own, first, 30 + 0.02 * (first + own + FIXED_WORK_TOKENS), t, H);
      recordFirstToken(a, own, second, both, t, H);
      const alone = chargePrefill(b, own);
      recordFirstToken(b, own, alone, 30 + 0.02 * (alone + own + FIXED_WORK_TOKENS), t, H);
      t += 50;
    }
    const p = policy(ms);
    const estimates = [0, 1].map((i) => {
      const r = request(null, 1100, 1000);
      p.pick(r, i === 0 ? [b] : [a]);
      return r.expectedTtftMs;
    });
    const expected = 30 + 0.02 * (1000 + FIXED_WORK_TOKENS);
    for (const e of estimates)
      assert.ok(Math.abs(e - expected) / expected < 0.02, `${estimates.join(', ')} vs ${expected}`);
  });

  it('divides the score by weight × weightFactor', () => {
    const ms = fleet.members(2, 1);
    rated(ms[0]!.node, 0.1);
    rated(ms[1]!.node, 0.1);
    chargePrefill(ms[0]!.node, 250); // 0.1 × (4 × 250 + 1128) / 2 = 106.4 < 0.1 × 1128
    const p = policy(ms);
    assert.equal(pickIndex(p, ms), 0);
    ms[0]!.node.weightFactor = 0.5; // 0.1 × 2128 / 1 > 112.8
    assert.equal(pickIndex(p, ms), 1);
  });

  it('rotates among nodes with equal scores instead of always taking the first', () => {
    const ms = fleet.members(1, 1, 1);
    const p = policy(ms);
    const seen = new Set(Array.from({ length: 9 }, () => pickIndex(p, ms)));
    assert.deepEqual(seen, new Set([0, 1, 2]));
  });
});

function policy(ms: readonly PoolMember[]): BalancePolicy {
  return createLeastResponseTime(ms, {});
}
