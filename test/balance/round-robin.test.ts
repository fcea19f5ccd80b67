/**
 * Smooth weighted round-robin: the shared conformance suite, then its own guarantees (interleaving,
 * exact shares over a window, skipping tried and ineligible nodes without skewing the shares,
 * slow start). Nodes are real UpstreamNode objects that never dispatch, so they open no connection.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RoundRobinPolicy, createRoundRobin } from '../../proxy/balance/round-robin.js';
import type { PoolMember } from '../../proxy/balance/balance-policy.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { runPolicyConformance } from './conformance.js';
import { TestFleet, request } from './fleet.js';

runPolicyConformance('round-robin', createRoundRobin);

const fleet = new TestFleet();

/** Names picks by member index (`A`, `B`, ...), `-` for null. */
function picks(
  policy: RoundRobinPolicy,
  ms: readonly PoolMember[],
  n: number,
  tried: readonly UpstreamNode[] = [],
): string {
  let out = '';
  const req = request();
  for (let i = 0; i < n; i++) {
    const picked = policy.pick(req, tried);
    const idx = ms.findIndex((m) => m.node === picked);
    out += picked === null ? '-' : String.fromCharCode(65 + idx);
  }
  return out;
}

function count(seq: string, letter: string): number {
  return [...seq].filter((c) => c === letter).length;
}

afterEach(() => fleet.close());

describe('round-robin policy', () => {
  it('reports its YAML kind', () => {
    assert.equal(createRoundRobin(fleet.members(1), {}).kind, 'round-robin');
  });

  it('interleaves a weight-2 node with a weight-1 node as A B A, not A A B', () => {
    const ms = fleet.members(2, 1);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(picks(policy, ms, 3), 'ABA');
    assert.equal(picks(policy, ms, 6), 'ABAABA');
  });

  it('alternates equal weights strictly', () => {
    const ms = fleet.members(1, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(picks(policy, ms, 9), 'ABCABCABC');
  });

  it('gives each node exactly its weight in every window of sum(weights) picks', () => {
    const weights = [5, 1, 3, 2];
    const ms = fleet.members(...weights);
    const policy = new RoundRobinPolicy(ms);
    const window = weights.reduce((a, b) => a + b, 0);
    for (let w = 0; w < 10; w++) {
      const seq = picks(policy, ms, window);
      weights.forEach((weight, i) => {
        assert.equal(count(seq, String.fromCharCode(65 + i)), weight, `window ${w}: ${seq}`);
      });
    }
  });

  it('spreads the light nodes through the window instead of bursting the heavy one (5:1:1)', () => {
    const ms = fleet.members(5, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    // Smooth WRR gives A A B A C A A for 5:1:1: within a window, never more than two A in a row.
    const seq = picks(policy, ms, 7);
    assert.doesNotMatch(seq, /AAA/, seq);
    assert.equal(count(seq, 'A'), 5, seq);
  });

  it('splits evenly between the remaining nodes while one is in tried', () => {
    const ms = fleet.members(1, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    const seq = picks(policy, ms, 30, [ms[1]!.node]);
    assert.doesNotMatch(seq, /B/);
    assert.equal(count(seq, 'A'), 15);
    assert.equal(count(seq, 'C'), 15);
  });

  it('keeps its shares exact after picks that skipped a tried or unavailable node', () => {
    const ms = fleet.members(2, 1);
    const policy = new RoundRobinPolicy(ms);
    picks(policy, ms, 7, [ms[0]!.node]);
    ms[1]!.node.available = false;
    picks(policy, ms, 5);
    ms[1]!.node.available = true;
    // The running scores must still sum to zero, so the long-run share stays 2:1.
    const seq = picks(policy, ms, 300);
    assert.equal(count(seq, 'A'), 200);
    assert.equal(count(seq, 'B'), 100);
  });

  it('returns null when the only member is in tried', () => {
    const ms = fleet.members(3);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(policy.pick(request(), [ms[0]!.node]), null);
  });

  it('scales a node in slow start by its weightFactor (exactly, over a window)', () => {
    const ms = fleet.members(1, 1);
    ms[1]!.node.weightFactor = 0.25;
    const policy = new RoundRobinPolicy(ms);
    const seq = picks(policy, ms, 500);
    assert.equal(count(seq, 'A'), 400);
    assert.equal(count(seq, 'B'), 100);
  });

  it('ignores load: a busy node keeps its turn', () => {
    const ms = fleet.members(1, 1);
    ms[0]!.node.inFlight = 50;
    ms[0]!.node.inFlightCost = 400_000;
    const policy = new RoundRobinPolicy(ms);
    assert.equal(picks(policy, ms, 4), 'ABAB');
  });

  it('leaves the affinity outcome alone', () => {
    const policy = new RoundRobinPolicy(fleet.members(1, 1));
    const req = request('session-1');
    policy.pick(req, []);
    assert.equal(req.affinityOutcome, 'none');
  });
});
