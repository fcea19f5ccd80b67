/**
 * The behaviour every balancing policy shares, as one suite each policy's test file runs: the
 * eligibility gate, `tried`, null when nothing is left, weight 0, weights and slow start under equal
 * load, and no allocation per pick. Policy-specific behaviour is tested beside each policy.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { BalanceOptions, BalancePolicyFactory } from '../../proxy/balance/balance-policy.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { ClosedLoop, TestFleet, request, shares } from './fleet.js';

/** Picks run by the "never returns X" properties; keys vary so hashing policies move around. */
const PROPERTY_PICKS = 2000;

/**
 * Registers the shared suite for one policy. `options` is passed to every `factory` call (e.g. a
 * PRNG seed, so that a failure replays exactly).
 *
 * @example
 * runPolicyConformance('round-robin', createRoundRobin);
 */
export function runPolicyConformance(
  name: string,
  factory: BalancePolicyFactory,
  options: BalanceOptions = {},
): void {
  describe(`${name} conformance`, () => {
    const fleet = new TestFleet();
    afterEach(() => fleet.close());

    /** Picks `n` times with varied keys and no load change, returning every node picked. */
    function pickMany(
      policy: ReturnType<BalancePolicyFactory>,
      n: number,
      tried: readonly UpstreamNode[] = [],
    ): (UpstreamNode | null)[] {
      const out: (UpstreamNode | null)[] = [];
      const req = request();
      for (let i = 0; i < n; i++) {
        req.affinityKey = `user-${i}`;
        req.cost = 1 + (i % 7) * 300;
        out.push(policy.pick(req, tried));
      }
      return out;
    }

    it('returns null for an empty pool', () => {
      const policy = factory([], options);
      assert.equal(policy.pick(request('k'), []), null);
      assert.equal(policy.pick(request(null), [fleet.node(1)]), null);
    });

    it('returns null when every member has weight 0', () => {
      const policy = factory(fleet.members(0, 0), options);
      assert.deepEqual(new Set(pickMany(policy, 50)), new Set([null]));
    });

    it('never picks a member of weight 0', () => {
      const ms = fleet.members(0, 1, 0, 2);
      const policy = factory(ms, options);
      for (const picked of pickMany(policy, PROPERTY_PICKS)) {
        assert.ok(picked === ms[1]!.node || picked === ms[3]!.node, picked?.id);
      }
    });

    it('never returns an unavailable node', () => {
      const ms = fleet.members(1, 1, 1, 1);
      ms[0]!.node.available = false;
      ms[2]!.node.available = false;
      const policy = factory(ms, options);
      for (const picked of pickMany(policy, PROPERTY_PICKS)) {
        assert.ok(picked === ms[1]!.node || picked === ms[3]!.node, picked?.id);
      }
    });

    it('never returns a saturated node', () => {
      const ms = fleet.members(1, 3, 1);
      ms[1]!.node.saturated = true;
      const policy = factory(ms, options);
      for (const picked of pickMany(policy, PROPERTY_PICKS)) {
        assert.ok(picked !== null && picked !== ms[1]!.node, picked?.id);
      }
    });

    it('never returns a node at its in-flight limit, and returns it again once below', () => {
      const ms = fleet.members(1, 1);
      const capped = ms[0]!.node;
      capped.maxInFlight = 2;
      capped.inFlight = 2;
      const policy = factory(ms, options);
      for (const picked of pickMany(policy, PROPERTY_PICKS)) assert.equal(picked, ms[1]!.node);
      capped.inFlight = 1;
      ms[1]!.node.available = false;
      assert.equal(policy.pick(request('k'), []), capped);
    });

    it('never returns a node in tried while other members are eligible', () => {
      const ms = fleet.members(1, 2, 1, 1);
      const tried = [ms[1]!.node, ms[2]!.node];
      const policy = factory(ms, options);
      const seen = new Set(pickMany(policy, PROPERTY_PICKS, tried));
      assert.ok(!seen.has(ms[1]!.node) && !seen.has(ms[2]!.node) && !seen.has(null));
    });

    it('returns null when every member was tried, rather than repeating one', () => {
      const ms = fleet.members(1, 1, 1);
      const policy = factory(ms, options);
      const tried = ms.map((m) => m.node);
      assert.deepEqual(new Set(pickMany(policy, 50, tried)), new Set([null]));
    });

    it('returns null when the only member is in tried', () => {
      const ms = fleet.members(3);
      const policy = factory(ms, options);
      assert.equal(policy.pick(request('k'), [ms[0]!.node]), null);
      assert.equal(policy.pick(request('k'), []), ms[0]!.node);
    });

    it('returns null when every untried member is ineligible, without falling back to a tried one', () => {
      const ms = fleet.members(1, 1, 1, 1);
      ms[1]!.node.available = false;
      ms[2]!.node.saturated = true;
      ms[3]!.node.maxInFlight = 0;
      const policy = factory(ms, options);
      assert.deepEqual(new Set(pickMany(policy, 50, [ms[0]!.node])), new Set([null]));
      assert.deepEqual(new Set(pickMany(policy, 50)), new Set([ms[0]!.node]));
    });

    it('does not pick a node whose slow-start factor is 0', () => {
      const ms = fleet.members(1, 1);
      ms[0]!.node.weightFactor = 0;
      const policy = factory(ms, options);
      assert.deepEqual(new Set(pickMany(policy, 200)), new Set([ms[1]!.node]));
    });

    it('picks every eligible node under equal load', () => {
      const ms = fleet.members(1, 1, 1, 1, 1);
      ms[4]!.node.available = false;
      const policy = factory(ms, options);
      const counts = shares(policy, ms, 1000, new ClosedLoop(12));
      assert.ok(
        counts.slice(0, 4).every((c) => c > 0),
        `counts ${counts.join(',')}`,
      );
      assert.equal(counts[4], 0);
    });

    it('gives each node a share that follows its weight under equal load (10k picks)', () => {
      const weights = [1, 1, 2, 1, 3];
      const ms = fleet.members(...weights);
      const policy = factory(ms, options);
      const picks = 10_000;
      const counts = shares(policy, ms, picks, new ClosedLoop(16), 500);
      const total = weights.reduce((a, b) => a + b, 0);
      weights.forEach((w, i) => {
        const expected = w / total;
        const got = counts[i]! / picks;
        // 30% relative: a ring's arcs vary with its points, and P2C/least-time converge to
        // proportional in-flight work, not to exact counts.
        assert.ok(Math.abs(got - expected) <= 0.3 * expected, `node ${i}: ${got} vs ${expected}`);
      });
    });

    it('sends far less to a node in slow start (weightFactor 0.1)', () => {
      const ms = fleet.members(1, 1, 1, 1);
      ms[0]!.node.weightFactor = 0.1;
      const policy = factory(ms, options);
      const counts = shares(policy, ms, 10_000, new ClosedLoop(16), 500);
      const peers = (counts[1]! + counts[2]! + counts[3]!) / 3;
      assert.ok(counts[0]! < 0.35 * peers, `slow-start node ${counts[0]} vs peers ${peers}`);
    });

    it('does not allocate on the common path', async () => {
      const ms = fleet.members(1, 2, 1, 1, 3, 1);
      ms[1]!.node.ttfbEwmaMs = 120;
      ms[2]!.node.ttfbEwmaMs = 80;
      const policy = factory(ms, options);
      const keys = Array.from({ length: 64 }, (_, i) => `session-${i}`);
      const req = request();
      const tried = [ms[0]!.node];
      const none: UpstreamNode[] = [];
      const run = (n: number): void => {
        for (let i = 0; i < n; i++) {
          req.affinityKey = (i & 3) === 0 ? null : keys[i & 63]!;
          const node = policy.pick(req, (i & 7) === 0 ? tried : none);
          if (node !== null) node.inFlightCost = (node.inFlightCost + 37) % 5000;
        }
      };
      run(200_000); // warm up: let the optimising compiler unbox the arithmetic
      // 1M picks allocating even 16 bytes each would fill the young generation several times over.
      // Best of five: on a busy machine the optimised code can arrive late (it compiles on a
      // background thread, which other work on two cores can starve for seconds), and the baseline
      // code before it boxes numbers; an allocating pick collects in every round.
      let gcs = Infinity;
      for (let round = 0; round < 5 && gcs > 1; round++) {
        gcs = Math.min(gcs, await minorGcsDuring(() => run(1_000_000)));
      }
      assert.ok(gcs <= 1, `${gcs} minor GCs during 1M picks`);
    });
  });
}

/** Number of minor (young-generation) collections while `fn` runs. */
async function minorGcsDuring(fn: () => void): Promise<number> {
  let count = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const detail = (entry as { detail?: { kind?: number } }).detail;
      if (detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) count++;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  // Start from a fresh young generation so leftovers of earlier tests do not count.
  await new Promise((resolve) => setTimeout(resolve, 20));
  count = 0;
  fn();
  await new Promise((resolve) => setTimeout(resolve, 20));
  observer.disconnect();
  return count;
}
