/**
 * Consistent hashing with bounded load: the shared conformance suite, the golden key→node mapping,
 * determinism across independently built policies, movement on removal and addition, weights,
 * the load bound (checked against a reference walk of the ring) and keyless requests.
 *
 * The golden file pins the mapping of a fixed corpus. If a change to the hash, the ring or the
 * point layout is deliberate (it reshuffles keys in every deployment on upgrade), regenerate it with
 * `UPDATE_GOLDEN=1` when running this test, e.g.
 * `npm run build && cd dist && UPDATE_GOLDEN=1 node --test test/balance/consistent-hash.test.js`,
 * and say so in the change.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { createConsistentHash, type ConsistentHashOptions } from '../../proxy/balance/consistent-hash.js';
import { HashRing, DEFAULT_POINTS_PER_WEIGHT } from '../../proxy/balance/hash-ring.js';
import { stableHash26 } from '../../proxy/balance/stable-hash.js';
import { Xorshift32 } from '../../proxy/balance/xorshift.js';
import type { BalancePolicy, PoolMember } from '../../proxy/balance/balance-policy.js';
import { eligible } from '../../proxy/balance/balance-policy.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { runPolicyConformance } from './conformance.js';
import { TestFleet, request } from './fleet.js';

// The shared suite and the bound tests below check the bound itself, so the spill floor is off.
const seeded: ConsistentHashOptions = { seed: 7, spillFloorTokens: 0 };
runPolicyConformance('consistent-hash', createConsistentHash, seeded);

const fleet = new TestFleet();
afterEach(() => fleet.close());

/** The node ids each key maps to at zero load. */
function mapping(policy: BalancePolicy, keys: readonly string[]): string[] {
  return keys.map((k) => policy.pick(request(k), [])?.id ?? 'null');
}

function keys(n: number, prefix = 'session-'): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}${i}`);
}

/** `n` members on hosts 10.0.0.1.. with weight 1 each. */
function equalMembers(n: number): PoolMember[] {
  return fleet.members(...Array.from({ length: n }, () => 1));
}

interface Golden {
  note: string;
  nodes: { id: string; weight: number }[];
  mapping: Record<string, string>;
}

describe('consistent-hash policy', () => {
  it('reports its YAML kind', () => {
    assert.equal(createConsistentHash(fleet.members(1), seeded).kind, 'consistent-hash');
  });

  it('maps the golden corpus exactly as committed', () => {
    const weights = [1, 1, 2, 1];
    const ms = fleet.members(...weights);
    const corpus = keys(200, 'golden-key-');
    const actual: Record<string, string> = {};
    mapping(createConsistentHash(ms, {}), corpus).forEach((id, i) => (actual[corpus[i]!] = id));
    const file = join(findSluiceRoot(), 'test', 'balance', 'consistent-hash.golden.json');
    if (process.env['UPDATE_GOLDEN'] === '1') {
      const golden: Golden = {
        note: 'Key → node at zero load, default options. Regenerate only deliberately: see consistent-hash.test.ts.',
        nodes: ms.map((m) => ({ id: m.node.id, weight: m.weight })),
        mapping: actual,
      };
      writeFileSync(file, `${JSON.stringify(golden, null, 2)}\n`);
    }
    const golden = JSON.parse(readFileSync(file, 'utf8')) as Golden;
    assert.deepEqual(
      golden.nodes,
      ms.map((m) => ({ id: m.node.id, weight: m.weight })),
    );
    assert.deepEqual(actual, golden.mapping);
  });

  it('maps keys identically in two independently built policies, whatever the member order', () => {
    const corpus = keys(5000);
    const a = createConsistentHash(fleet.members(1, 2, 1, 3, 1), {});
    const reordered = fleet.members(1, 2, 1, 3, 1).reverse();
    const b = createConsistentHash(reordered, {});
    assert.deepEqual(mapping(a, corpus), mapping(b, corpus));
  });

  it('moves about 1/N of the keys when one of N nodes is removed, and only that node keys', () => {
    const ms = equalMembers(10);
    const corpus = keys(10_000);
    const before = mapping(createConsistentHash(ms, {}), corpus);
    const removed = ms[3]!.node.id;
    const after = mapping(
      createConsistentHash(
        ms.filter((_, i) => i !== 3),
        {},
      ),
      corpus,
    );
    let moved = 0;
    for (let i = 0; i < corpus.length; i++) {
      if (before[i] === after[i]) continue;
      moved++;
      assert.equal(before[i], removed, `${corpus[i]} moved from ${before[i]} to ${after[i]}`);
    }
    const share = moved / corpus.length;
    assert.ok(share > 0.05 && share < 0.15, `moved share ${share}`);
  });

  it('moves only keys onto a node that is added', () => {
    const ms = equalMembers(9);
    const corpus = keys(10_000);
    const before = mapping(createConsistentHash(ms, {}), corpus);
    const added = fleet.node(10);
    const after = mapping(createConsistentHash([...ms, { node: added, weight: 1 }], {}), corpus);
    let moved = 0;
    for (let i = 0; i < corpus.length; i++) {
      if (before[i] === after[i]) continue;
      moved++;
      assert.equal(after[i], added.id);
    }
    const share = moved / corpus.length;
    assert.ok(share > 0.05 && share < 0.15, `moved share ${share}`);
  });

  it('gives each node a share of keys proportional to its weight', () => {
    const weights = [1, 2, 3, 4];
    const ms = fleet.members(...weights);
    const corpus = keys(40_000);
    const ids = mapping(createConsistentHash(ms, {}), corpus);
    weights.forEach((w, i) => {
      const share = ids.filter((id) => id === ms[i]!.node.id).length / corpus.length;
      const expected = w / 10;
      assert.ok(Math.abs(share - expected) < 0.2 * expected, `node ${i}: ${share} vs ${expected}`);
    });
  });

  it('places a request that keeps its key’s ring hash by that hash, as the key itself would be', () => {
    const policy = createConsistentHash(equalMembers(8), {});
    for (const key of keys(200)) {
      // The hash kept beside the key is read instead of hashing the key again: one of another key
      // places the request where that other key goes.
      const other = `${key}-other`;
      const kept = { ...request(key), affinityHash: (): number => stableHash26(other) };
      assert.equal(policy.pick(kept, [])?.id, policy.pick(request(other), [])?.id, key);
    }
  });

  it('reports hit when the home node serves the key', () => {
    const policy = createConsistentHash(equalMembers(4), {});
    const req = request('session-1');
    assert.notEqual(policy.pick(req, []), null);
    assert.equal(req.affinityOutcome, 'hit');
  });

  it('spills an overloaded home node to the next node on the ring, outcome spill', () => {
    const ms = equalMembers(4);
    const policy = createConsistentHash(ms, { spillFloorTokens: 0 });
    const key = 'session-42';
    const order = ringOrder(ms, key);
    const home = order[0]!;
    const req = request(key, 1000);
    assert.equal(policy.pick(req, []), home);
    // Mean with this request: (8000 + 1000) / 4 = 2250; bound 1.25 × that = 2812.5 < 8000.
    home.inFlightCost = 8000;
    assert.equal(policy.pick(req, []), order[1]);
    assert.equal(req.affinityOutcome, 'spill');
    // The second node is loaded too: the walk goes on to the third.
    order[1]!.inFlightCost = 8000;
    assert.equal(policy.pick(req, []), order[2]);
    assert.equal(req.affinityOutcome, 'spill');
  });

  it('keeps a key on a home node below the spill floor even above its share, unless it is in slow start', () => {
    const ms = equalMembers(4);
    const policy = createConsistentHash(ms, { spillFloorTokens: 10_000 });
    const order = ringOrder(ms, 'session-9');
    const req = request('session-9', 1000);
    order[0]!.inFlightCost = 8000; // far above its share of the pool's 9000, below the floor
    assert.equal(policy.pick(req, []), order[0]);
    assert.equal(req.affinityOutcome, 'hit');
    order[0]!.inFlightCost = 12_000; // above the floor: the bound applies
    assert.equal(policy.pick(req, []), order[1]);
    assert.equal(req.affinityOutcome, 'spill');
    order[0]!.inFlightCost = 8000;
    order[0]!.weightFactor = 0.5; // slow start: no floor
    assert.equal(policy.pick(req, []), order[1]);
  });

  it('keeps the key on its home node while every node carries the same load', () => {
    const ms = equalMembers(4);
    ms.forEach((m) => (m.node.inFlightCost = 50_000));
    const policy = createConsistentHash(ms, {});
    const req = request('session-42', 1000);
    assert.equal(policy.pick(req, []), ringOrder(ms, 'session-42')[0]);
    assert.equal(req.affinityOutcome, 'hit');
  });

  it('spills a key whose home node is down or was tried, always to the same successor', () => {
    const ms = equalMembers(5);
    const policy = createConsistentHash(ms, {});
    const order = ringOrder(ms, 'session-7');
    const req = request('session-7');
    assert.equal(policy.pick(req, [order[0]!]), order[1]);
    assert.equal(req.affinityOutcome, 'spill');
    order[0]!.available = false;
    for (let i = 0; i < 5; i++) assert.equal(policy.pick(req, []), order[1]);
    assert.equal(req.affinityOutcome, 'spill');
  });

  it('never places a request above its node bound while a node within its bound exists', () => {
    const weights = [1, 2, 1, 1, 3, 1];
    const ms = fleet.members(...weights);
    const epsilon = 0.25;
    const policy = createConsistentHash(ms, { epsilon, spillFloorTokens: 0 });
    const rng = new Xorshift32(99);
    const req = request();
    for (let round = 0; round < 3000; round++) {
      for (const m of ms) {
        m.node.inFlightCost = rng.nextUint32() % 40_000;
        m.node.weightFactor = rng.nextFloat() < 0.1 ? 0.3 : 1;
        m.node.available = rng.nextFloat() > 0.05;
      }
      req.affinityKey = `user-${rng.nextUint32() % 500}`;
      req.cost = 1 + (rng.nextUint32() % 8000);
      const picked = policy.pick(req, []);
      const expected = referencePick(ms, req.affinityKey, req.cost, epsilon);
      assert.equal(picked, expected.node, `round ${round}`);
      if (picked !== null) {
        assert.equal(req.affinityOutcome, expected.home === picked ? 'hit' : 'spill');
      }
    }
  });

  it('ignores load entirely when epsilon is Infinity', () => {
    const ms = equalMembers(3);
    const policy = createConsistentHash(ms, { epsilon: Infinity });
    const home = ringOrder(ms, 'k')[0]!;
    home.inFlightCost = 1e9;
    const req = request('k');
    assert.equal(policy.pick(req, []), home);
    assert.equal(req.affinityOutcome, 'hit');
  });

  it('places keyless requests by least request, outcome none', () => {
    const ms = equalMembers(3);
    ms[0]!.node.inFlightCost = 100;
    ms[1]!.node.inFlightCost = 9000;
    ms[2]!.node.inFlightCost = 200;
    const policy = createConsistentHash(ms, seeded);
    const req = request(null);
    for (let i = 0; i < 500; i++) {
      req.affinityOutcome = 'hit';
      assert.notEqual(policy.pick(req, []), ms[1]!.node);
      assert.equal(req.affinityOutcome, 'none');
    }
  });

  it('uses more ring points per weight when asked, which evens out the shares', () => {
    const corpus = keys(20_000);
    const spread = (ppw: number): number => {
      const ms = equalMembers(8);
      const ids = mapping(createConsistentHash(ms, { pointsPerWeight: ppw }), corpus);
      const counts = ms.map((m) => ids.filter((id) => id === m.node.id).length);
      return (Math.max(...counts) - Math.min(...counts)) / (corpus.length / 8);
    };
    assert.ok(spread(400) < spread(4), `${spread(400)} vs ${spread(4)}`);
  });

  it('refuses a ring of absurd size at build time', () => {
    assert.throws(() => createConsistentHash(fleet.members(1e6), {}), RangeError);
  });
});

/** The distinct nodes met walking the ring clockwise from `key`'s hash (reference, slow). */
function ringOrder(ms: readonly PoolMember[], key: string): UpstreamNode[] {
  const live = ms.filter((m) => m.weight > 0);
  const ring = new HashRing(
    live.map((m) => m.node.id),
    live.map((m) => m.weight),
    DEFAULT_POINTS_PER_WEIGHT,
  );
  const order: UpstreamNode[] = [];
  const start = ring.locate(key);
  for (let k = 0; k < ring.size && order.length < live.length; k++) {
    const node = live[ring.owners[(start + k) % ring.size]!]!.node;
    if (!order.includes(node)) order.push(node);
  }
  return order;
}

/**
 * What the policy must pick, computed the slow, obvious way: the first node clockwise that is
 * eligible and whose load is under `(1 + epsilon) × (pool load + cost) × its share of the pool's
 * effective weight`; if none is, the least loaded per unit of weight.
 */
function referencePick(
  ms: readonly PoolMember[],
  key: string,
  cost: number,
  epsilon: number,
): { node: UpstreamNode | null; home: UpstreamNode | undefined } {
  const eff = (m: PoolMember): number => (eligible(m.node) ? m.weight * m.node.weightFactor : 0);
  const live = ms.filter((m) => eff(m) > 0);
  const order = ringOrder(ms, key);
  if (live.length === 0) return { node: null, home: order[0] };
  const poolCost = live.reduce((s, m) => s + m.node.inFlightCost, 0);
  const poolWeight = live.reduce((s, m) => s + eff(m), 0);
  for (const node of order) {
    const m = live.find((x) => x.node === node);
    if (m === undefined) continue;
    const bound = (((1 + epsilon) * (poolCost + cost)) / poolWeight) * eff(m);
    if (node.inFlightCost < bound) return { node, home: order[0] };
  }
  const least = [...live].sort(
    (a, b) => (a.node.inFlightCost + cost) / eff(a) - (b.node.inFlightCost + cost) / eff(b),
  )[0]!;
  return { node: least.node, home: order[0] };
}
