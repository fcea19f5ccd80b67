/**
 * Least response time: the shared conformance suite, then its scoring: lower TTFB wins, in-flight
 * work raises the score, weights divide it, unprobed nodes get a fair start without a flood, and a
 * stale slow average fades so the node is probed again.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createLeastResponseTime } from '../../proxy/balance/least-response-time.js';
import type { BalancePolicy, PoolMember } from '../../proxy/balance/balance-policy.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { runPolicyConformance } from './conformance.js';
import { ClosedLoop, TestFleet, request, shares } from './fleet.js';

runPolicyConformance('least-response-time', createLeastResponseTime);

const fleet = new TestFleet();
afterEach(() => fleet.close());

/** Gives `node` a TTFB average of `ms` last updated at `atMs`. */
function probed(node: UpstreamNode, ms: number, atMs = 1000): void {
  node.ttfbEwmaMs = ms;
  node.ttfbUpdatedMs = atMs;
}

function pickIndex(policy: BalancePolicy, ms: readonly PoolMember[], cost = 1000): number {
  const picked = policy.pick(request(null, cost), []);
  return ms.findIndex((m) => m.node === picked);
}

describe('least-response-time policy', () => {
  it('reports its YAML kind', () => {
    assert.equal(createLeastResponseTime(fleet.members(1), {}).kind, 'least-response-time');
  });

  it('sends every request to the fastest node while load is equal', () => {
    const ms = fleet.members(1, 1, 1);
    probed(ms[0]!.node, 200);
    probed(ms[1]!.node, 50);
    probed(ms[2]!.node, 120);
    const policy = createLeastResponseTime(ms, {});
    for (let i = 0; i < 20; i++) assert.equal(pickIndex(policy, ms), 1);
  });

  it('gives the lower-TTFB node most of the traffic under steady load', () => {
    const ms = fleet.members(1, 1);
    probed(ms[0]!.node, 50);
    probed(ms[1]!.node, 200);
    const policy = createLeastResponseTime(ms, {});
    const counts = shares(policy, ms, 5000, new ClosedLoop(10), 1000);
    assert.ok(counts[0]! > 0.7 * 5000, `fast node got ${counts[0]} of 5000`);
    assert.ok(counts[1]! > 0, 'the slow node still takes the overflow');
  });

  it('raises a node score with its in-flight work: ttfb × (1 + load)', () => {
    const ms = fleet.members(1, 1);
    probed(ms[0]!.node, 50);
    probed(ms[1]!.node, 200);
    const policy = createLeastResponseTime(ms, {});
    assert.equal(pickIndex(policy, ms), 0); // sets the mean request cost to 1000 tokens
    ms[0]!.node.inFlightCost = 2000; // 50 × (1 + 2) = 150 < 200
    assert.equal(pickIndex(policy, ms), 0);
    ms[0]!.node.inFlightCost = 4000; // 50 × (1 + 4) = 250 > 200
    assert.equal(pickIndex(policy, ms), 1);
  });

  it('measures load in average requests, so a few long prompts weigh more than many short ones', () => {
    const ms = fleet.members(1, 1);
    probed(ms[0]!.node, 100);
    probed(ms[1]!.node, 100);
    const policy = createLeastResponseTime(ms, {});
    pickIndex(policy, ms, 1000);
    ms[0]!.node.inFlight = 3;
    ms[0]!.node.inFlightCost = 3 * 8000;
    ms[1]!.node.inFlight = 10;
    ms[1]!.node.inFlightCost = 10 * 300;
    assert.equal(pickIndex(policy, ms, 1000), 1);
  });

  it('divides the score by weight × weightFactor', () => {
    const ms = fleet.members(2, 1);
    probed(ms[0]!.node, 100);
    probed(ms[1]!.node, 100);
    const policy = createLeastResponseTime(ms, {});
    pickIndex(policy, ms, 1000);
    ms[0]!.node.inFlightCost = 2000; // 100 × 3 / 2 = 150
    ms[1]!.node.inFlightCost = 1000; // 100 × 2 / 1 = 200
    assert.equal(pickIndex(policy, ms, 1000), 0);
    ms[0]!.node.weightFactor = 0.5; // 100 × 3 / 1 = 300
    assert.equal(pickIndex(policy, ms, 1000), 1);
  });

  it('scores an unprobed node with the pool mean TTFB (a fair start)', () => {
    const ms = fleet.members(1, 1, 1);
    probed(ms[0]!.node, 50);
    probed(ms[1]!.node, 150);
    const policy = createLeastResponseTime(ms, {}); // node 2 unprobed: scores as 100 ms
    assert.equal(pickIndex(policy, ms), 0);
    ms[0]!.node.inFlightCost = 2000; // 50 × 3 = 150 > 100 × 1
    assert.equal(pickIndex(policy, ms), 2);
  });

  it('gives an unprobed node some traffic but not a flood', () => {
    const ms = fleet.members(1, 1, 1, 1);
    probed(ms[0]!.node, 100);
    probed(ms[1]!.node, 100);
    probed(ms[2]!.node, 100);
    const policy = createLeastResponseTime(ms, {});
    const counts = shares(policy, ms, 4000, new ClosedLoop(16), 800);
    const share = counts[3]! / 4000;
    assert.ok(share > 0.1 && share < 0.4, `unprobed node share ${share}`);
  });

  it('balances by load alone while no node has been probed', () => {
    const ms = fleet.members(1, 1, 1);
    ms[0]!.node.inFlightCost = 3000;
    ms[2]!.node.inFlightCost = 1000;
    const policy = createLeastResponseTime(ms, {});
    assert.equal(pickIndex(policy, ms), 1);
  });

  it('probes again a node whose slow average has gone stale while others kept answering', () => {
    const ms = fleet.members(1, 1);
    const policy = createLeastResponseTime(ms, { decayMs: 10_000 });
    probed(ms[0]!.node, 50, 100_000);
    probed(ms[1]!.node, 1000, 100_000);
    pickIndex(policy, ms);
    ms[0]!.node.inFlightCost = 1000; // 50 × 2 = 100: still far better than a fresh 1000 ms
    assert.equal(pickIndex(policy, ms), 0);
    // Ten half-lives older than the newest sample: the 1000 ms average is almost entirely faded
    // toward the pool reference (~51 ms), so the busy fast node now loses to it.
    probed(ms[1]!.node, 1000, 0);
    assert.equal(pickIndex(policy, ms), 1);
  });

  it('rotates among nodes with equal scores instead of always taking the first', () => {
    const ms = fleet.members(1, 1, 1);
    const policy = createLeastResponseTime(ms, {});
    const seen = new Set(Array.from({ length: 9 }, () => pickIndex(policy, ms)));
    assert.deepEqual(seen, new Set([0, 1, 2]));
  });
});
