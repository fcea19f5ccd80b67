/**
 * Unit tests of the smooth weighted round-robin policy: interleaving, exact shares over a window,
 * exclusion of the node that just failed, weight 0 and the empty pool. Nodes are real UpstreamNode
 * objects that never dispatch, so they open no connection; they are closed after each test.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RoundRobinPolicy, createRoundRobin } from '../../proxy/balance/round-robin.js';
import type { PoolMember } from '../../proxy/balance/balance-policy.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

const created: UpstreamNode[] = [];

/** A node on a loopback port nothing listens on; it never connects unless dispatched to. */
function node(port: number): UpstreamNode {
  const n = new UpstreamNode(`http://127.0.0.1:${port}`, { connections: 1, connectTimeoutMs: 100 });
  created.push(n);
  return n;
}

function members(...weights: number[]): PoolMember[] {
  return weights.map((weight, i) => ({ node: node(1 + i), weight }));
}

/** Names picks by member index (`A`, `B`, ...), `-` for null. */
function picks(
  policy: RoundRobinPolicy,
  ms: readonly PoolMember[],
  n: number,
  exclude: UpstreamNode | null = null,
): string {
  let out = '';
  for (let i = 0; i < n; i++) {
    const picked = policy.pick(exclude);
    const idx = ms.findIndex((m) => m.node === picked);
    out += picked === null ? '-' : String.fromCharCode(65 + idx);
  }
  return out;
}

afterEach(async () => {
  await Promise.all(created.splice(0).map((n) => n.close()));
});

describe('round-robin policy', () => {
  it('reports its YAML kind', () => {
    assert.equal(createRoundRobin(members(1)).kind, 'round-robin');
  });

  it('interleaves a weight-2 node with a weight-1 node as A B A, not A A B', () => {
    const ms = members(2, 1);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(picks(policy, ms, 3), 'ABA');
    assert.equal(picks(policy, ms, 6), 'ABAABA');
  });

  it('alternates equal weights strictly', () => {
    const ms = members(1, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(picks(policy, ms, 9), 'ABCABCABC');
  });

  it('gives each node exactly its weight in every window of sum(weights) picks', () => {
    const weights = [5, 1, 3, 2];
    const ms = members(...weights);
    const policy = new RoundRobinPolicy(ms);
    const window = weights.reduce((a, b) => a + b, 0);
    for (let w = 0; w < 10; w++) {
      const seq = picks(policy, ms, window);
      weights.forEach((weight, i) => {
        const letter = String.fromCharCode(65 + i);
        assert.equal([...seq].filter((c) => c === letter).length, weight, `window ${w}: ${seq}`);
      });
    }
  });

  it('spreads the light nodes through the window instead of bursting the heavy one (5:1:1)', () => {
    const ms = members(5, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    // Smooth WRR gives A A B A C A A for 5:1:1: within a window, never more than two A in a row.
    const seq = picks(policy, ms, 7);
    assert.doesNotMatch(seq, /AAA/, seq);
    assert.equal([...seq].filter((c) => c === 'A').length, 5, seq);
  });

  it('skips the excluded node while other nodes remain', () => {
    const ms = members(1, 1, 1);
    const policy = new RoundRobinPolicy(ms);
    const excluded = ms[1]!.node;
    const seq = picks(policy, ms, 30, excluded);
    assert.doesNotMatch(seq, /B/);
    assert.equal([...seq].filter((c) => c === 'A').length, 15);
    assert.equal([...seq].filter((c) => c === 'C').length, 15);
  });

  it('keeps its shares exact after picks that excluded a node', () => {
    const ms = members(2, 1);
    const policy = new RoundRobinPolicy(ms);
    picks(policy, ms, 7, ms[0]!.node);
    picks(policy, ms, 5, ms[1]!.node);
    // The running scores must still sum to zero, so the long-run share stays 2:1.
    const seq = picks(policy, ms, 300);
    assert.equal([...seq].filter((c) => c === 'A').length, 200);
    assert.equal([...seq].filter((c) => c === 'B').length, 100);
  });

  it('returns the excluded node when it is the only member', () => {
    const ms = members(3);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(policy.pick(ms[0]!.node), ms[0]!.node);
  });

  it('never picks a node of weight 0', () => {
    const ms = members(0, 1, 0, 2);
    const policy = new RoundRobinPolicy(ms);
    const seq = picks(policy, ms, 60);
    assert.doesNotMatch(seq, /[AC]/);
    assert.equal([...seq].filter((c) => c === 'D').length, 40);
  });

  it('returns null when every node has weight 0', () => {
    const ms = members(0, 0);
    const policy = new RoundRobinPolicy(ms);
    assert.equal(policy.pick(null), null);
  });

  it('returns null for an empty pool', () => {
    const policy = new RoundRobinPolicy([]);
    assert.equal(policy.pick(null), null);
    assert.equal(policy.pick(node(9)), null);
  });
});
