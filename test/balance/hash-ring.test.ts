/**
 * The consistent-hash ring on the `consistent-hash` package: points placed from node ids alone (the
 * same ring in every process, whatever the member order, with no random numbers), shared positions
 * resolved by node id, lookups that follow our key hash rather than the package's own, and an even
 * spread of keys that differ only in their last characters.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HashRing, MAX_RING_POINTS, RING_RANGE, keyPosition } from '../../proxy/balance/hash-ring.js';
import { stableHash32 } from '../../proxy/balance/stable-hash.js';

const IDS = ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000', 'http://10.0.0.4:8000'];
const WEIGHTS = [1, 2, 1, 3];

/** The ring's points as `position → owner id`. */
function pointsOf(ring: HashRing, ids: readonly string[]): Map<number, string> {
  const out = new Map<number, string>();
  for (let i = 0; i < ring.size; i++) out.set(ring.positions[i]!, ids[ring.owners[i]!]!);
  return out;
}

/** Index of the first position at or after `p`, wrapping to 0 (the reference lookup). */
function firstAtOrAfter(ring: HashRing, p: number): number {
  for (let i = 0; i < ring.size; i++) if (ring.positions[i]! >= p) return i;
  return 0;
}

describe('hash ring', () => {
  it('places the same points for the same nodes whatever their order in the config', () => {
    const a = new HashRing(IDS, WEIGHTS, 100);
    const reversed = [...IDS].reverse();
    const b = new HashRing(reversed, [...WEIGHTS].reverse(), 100);
    assert.equal(a.size, 700);
    assert.deepEqual(a.positions, b.positions);
    assert.deepEqual(pointsOf(a, IDS), pointsOf(b, reversed));
    for (let k = 0; k < 500; k++) {
      const key = `session-${k}`;
      assert.equal(IDS[a.owners[a.locate(key)]!], reversed[b.owners[b.locate(key)]!], key);
    }
  });

  it('puts point j of a node at stableHash32(id#j) mod the ring size, and never draws a random number', () => {
    const random = Math.random;
    Math.random = (): number => {
      throw new Error('the ring must not use Math.random');
    };
    try {
      const ring = new HashRing([IDS[0]!], [1], 100);
      const expected = Array.from({ length: 100 }, (_, j) => stableHash32(`${IDS[0]!}#${j}`) % RING_RANGE);
      assert.deepEqual(
        [...ring.positions],
        expected.sort((x, y) => x - y),
      );
      assert.ok(ring.owners.every((o) => o === 0));
      for (let k = 0; k < 100; k++) ring.locate(`key-${k}`);
    } finally {
      Math.random = random;
    }
  });

  it('sends a key to the first point at or after its own position, wrapping past the end', () => {
    // The package would place keys with its own hash; the ring's must be the one in effect.
    const ring = new HashRing(IDS, WEIGHTS, 100);
    for (let k = 0; k < 2000; k++) {
      const key = k % 2 === 0 ? `session-${k}` : `${k.toString(16)}-${k * 7919}`;
      assert.equal(ring.locate(key), firstAtOrAfter(ring, keyPosition(key)), key);
    }
    const last = ring.positions[ring.size - 1]!;
    let wrapped = 0;
    for (let k = 0; wrapped === 0 && k < 1_000_000; k++) {
      if (keyPosition(`w${k}`) > last) wrapped = ring.locate(`w${k}`) === 0 ? 1 : -1;
    }
    assert.equal(wrapped, 1, 'a key after the last point belongs to the first');
    assert.equal(new HashRing([], [], 100).locate('k'), -1);
  });

  it('finds the same point as the package’s own lookup for every key', () => {
    const ring = new HashRing(IDS, WEIGHTS, 100);
    for (let k = 0; k < 5000; k++) {
      const key = k % 3 === 0 ? `conversation-${k}` : `${(k * 2654435761) >>> 0}:${k}`;
      assert.equal(ring.locate(key), ring.packagePoint(key), key);
    }
    assert.equal(new HashRing([], [], 100).packagePoint('k'), -1);
  });

  it('finds from a key hash, through its bucket, the point a scan of every position finds', () => {
    // Rings of 1 to 700 points; hashes at, just below and just above every bucket's start and every
    // point's position (26-bit hashes: a position is the hash × 32).
    for (const [ids, ppw] of [
      [IDS.slice(0, 1), 0.01],
      [IDS.slice(0, 2), 0.01],
      [IDS.slice(0, 3), 0.01],
      [IDS, 1],
      [IDS, 10],
      [IDS, 100],
    ] as const) {
      const ring = new HashRing(ids, WEIGHTS, ppw);
      let bits = 0;
      while (1 << bits < ring.size) bits++;
      const hashes: number[] = [0, 2 ** 26 - 1];
      for (let j = 1; j < 1 << bits; j++) hashes.push(j * 2 ** (26 - bits));
      for (const p of ring.positions) hashes.push(p >>> 5);
      for (const h of hashes) {
        for (const x of [h - 1, h, h + 1]) {
          if (x < 0 || x >= 2 ** 26) continue;
          assert.equal(ring.locateHash(x), firstAtOrAfter(ring, x * 32), `${ring.size} points, hash ${x}`);
        }
      }
    }
  });

  it('gives a position two nodes share to the node whose id sorts first, in any order', () => {
    // Find two ids whose points coincide (a birthday search over ~50k points of 2^31 positions).
    const seen = new Map<number, string>();
    let pair: [string, string] | null = null;
    for (let n = 0; pair === null && n < 5000; n++) {
      const id = `http://node-${n}.bench:8000`;
      for (let j = 0; j < 100; j++) {
        const p = stableHash32(`${id}#${j}`) % RING_RANGE;
        const other = seen.get(p);
        if (other !== undefined && other !== id) {
          pair = [other, id];
          break;
        }
        seen.set(p, id);
      }
    }
    assert.ok(pair !== null, 'no shared position found');
    const [first, second] = pair[0] < pair[1] ? pair : [pair[1], pair[0]];
    const shared = [...pointsOf(new HashRing([first], [1], 100), [first]).keys()].find((p) =>
      pointsOf(new HashRing([second], [1], 100), [second]).has(p),
    )!;
    for (const ids of [
      [first, second],
      [second, first],
    ]) {
      const ring = new HashRing(ids, [1, 1], 100);
      assert.equal(ring.size, 199);
      assert.equal(pointsOf(ring, ids).get(shared), first);
    }
    assert.equal(pointsOf(new HashRing([second], [1], 100), [second]).get(shared), second);
  });

  it('spreads keys that differ only in their last characters evenly over the nodes', () => {
    const ids = Array.from({ length: 16 }, (_, i) => `http://10.0.0.${i + 1}:8000`);
    const ring = new HashRing(
      ids,
      ids.map(() => 1),
      100,
    );
    const counts = new Array<number>(16).fill(0);
    for (let k = 0; k < 1000; k++) counts[ring.owners[ring.locate(`session-${k}`)]!]!++;
    // The package's own key hash puts runs of such keys on one node (shares from 0.14 to 1.95).
    const mean = 1000 / 16;
    for (const c of counts) assert.ok(c > 0.5 * mean && c < 1.5 * mean, `counts ${counts.join(',')}`);
  });

  it('refuses a ring above the point limit', () => {
    assert.throws(() => new HashRing(IDS, [MAX_RING_POINTS, 1, 1, 1], 1), RangeError);
  });
});
