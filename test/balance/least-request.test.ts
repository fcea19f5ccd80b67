/**
 * Power-of-two-choices least-request: the shared conformance suite, then its own behaviour: load
 * counted in tokens and divided by effective weight, tie-breaking, and exact replay from a seed.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createLeastRequest, type LeastRequestOptions } from '../../proxy/balance/least-request.js';
import type { BalancePolicy, PoolMember } from '../../proxy/balance/balance-policy.js';
import { runPolicyConformance } from './conformance.js';
import { TestFleet, request } from './fleet.js';

const seeded: LeastRequestOptions = { seed: 20240601 };
runPolicyConformance('least-request', createLeastRequest, seeded);

const fleet = new TestFleet();
afterEach(() => fleet.close());

/** Indexes of the members picked by `n` picks of `cost` tokens (no load change between picks). */
function sequence(policy: BalancePolicy, ms: readonly PoolMember[], n: number, cost = 100): number[] {
  const req = request(null, cost);
  return Array.from({ length: n }, () => {
    const picked = policy.pick(req, []);
    return ms.findIndex((m) => m.node === picked);
  });
}

describe('least-request policy', () => {
  it('reports its YAML kind', () => {
    assert.equal(createLeastRequest(fleet.members(1), seeded).kind, 'least-request');
  });

  it('sends the request to the less loaded of two nodes', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.inFlight = 4;
    ms[0]!.node.inFlightCost = 4000;
    ms[1]!.node.inFlight = 1;
    ms[1]!.node.inFlightCost = 1000;
    const policy = createLeastRequest(ms, seeded);
    assert.deepEqual(new Set(sequence(policy, ms, 100)), new Set([1]));
  });

  it('counts load in tokens: three 8k-token prompts are busier than three short ones', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.inFlight = 3;
    ms[0]!.node.inFlightCost = 3 * 8192;
    ms[1]!.node.inFlight = 3;
    ms[1]!.node.inFlightCost = 3 * 200;
    const policy = createLeastRequest(ms, seeded);
    assert.deepEqual(new Set(sequence(policy, ms, 100)), new Set([1]));
  });

  it('divides in-flight work by weight, so a heavier node takes more before it loses', () => {
    const ms = fleet.members(3, 1);
    ms[0]!.node.inFlightCost = 3000; // (3000 + 100) / 3 ≈ 1033 per unit of weight
    ms[1]!.node.inFlightCost = 1500; // (1500 + 100) / 1 = 1600
    const policy = createLeastRequest(ms, seeded);
    assert.deepEqual(new Set(sequence(policy, ms, 50)), new Set([0]));
  });

  it('divides by the slow-start factor as well as the weight', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.weightFactor = 0.5;
    ms[0]!.node.inFlightCost = 400; // (400 + 100) / 0.5 = 1000
    ms[1]!.node.inFlightCost = 700; // (700 + 100) / 1 = 800
    const policy = createLeastRequest(ms, seeded);
    assert.deepEqual(new Set(sequence(policy, ms, 50)), new Set([1]));
  });

  it('breaks a tie in work by the number of attempts in flight', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.inFlight = 5;
    ms[0]!.node.inFlightCost = 1000;
    ms[1]!.node.inFlight = 1;
    ms[1]!.node.inFlightCost = 1000;
    const policy = createLeastRequest(ms, seeded);
    assert.deepEqual(new Set(sequence(policy, ms, 50)), new Set([1]));
  });

  it('never chooses the single most loaded of three nodes (the two choices are distinct)', () => {
    const ms = fleet.members(1, 1, 1);
    ms[0]!.node.inFlightCost = 100;
    ms[1]!.node.inFlightCost = 9000;
    ms[2]!.node.inFlightCost = 200;
    const policy = createLeastRequest(ms, seeded);
    const seq = sequence(policy, ms, 2000);
    assert.ok(!seq.includes(1));
    // Both others win sometimes: node 2 wins whenever the pair is {1, 2}.
    assert.ok(seq.includes(0) && seq.includes(2));
  });

  it('replays the same sequence from the same seed, and another from another seed', () => {
    const ms = fleet.members(1, 1, 1, 1, 1, 1, 1, 1);
    ms.forEach((m, i) => (m.node.inFlightCost = (i * 37) % 5)); // near ties: the sampling decides
    const a = sequence(createLeastRequest(ms, { seed: 1 }), ms, 200);
    const b = sequence(createLeastRequest(ms, { seed: 1 }), ms, 200);
    const c = sequence(createLeastRequest(ms, { seed: 2 }), ms, 200);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  it('leaves the affinity outcome at none', () => {
    const policy = createLeastRequest(fleet.members(1, 1), seeded);
    const req = request('session-1');
    policy.pick(req, []);
    assert.equal(req.affinityOutcome, 'none');
  });
});
