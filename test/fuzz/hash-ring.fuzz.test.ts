/**
 * Property tests of the consistent-hash ring (`proxy/balance/hash-ring.ts`): points sorted, distinct
 * and owned by real members; a key belongs to the first point at or after its position (wrapping);
 * the mapping depends on node ids and weights only, never on their order in the config; removing a
 * node moves only its own keys, adding one moves keys only to it, raising a weight moves keys only
 * to that node.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { HashRing, RING_RANGE, keyPosition } from '../../proxy/balance/hash-ring.js';
import { FUZZ_TIMEOUT_MS, fuzzParams } from './fuzz-runs.js';

interface Member {
  id: string;
  weight: number;
}

const members = fc.uniqueArray(
  fc.record({
    id: fc.oneof(
      fc.integer({ min: 1, max: 65535 }).map((p) => `http://10.0.0.${p % 255}:${p}`),
      fc.string({ minLength: 1, maxLength: 12 }),
    ),
    weight: fc.integer({ min: 1, max: 4 }),
  }),
  { minLength: 1, maxLength: 7, selector: (m) => m.id },
);
const keys = fc.array(fc.string({ maxLength: 16 }), { minLength: 1, maxLength: 40 });
const ppw = fc.integer({ min: 1, max: 40 });

function ring(ms: readonly Member[], pointsPerWeight: number): HashRing {
  return new HashRing(
    ms.map((m) => m.id),
    ms.map((m) => m.weight),
    pointsPerWeight,
  );
}

/** The id of the member `key` belongs to. */
function owner(r: HashRing, ms: readonly Member[], key: string): string {
  const i = r.locate(key);
  return ms[r.owners[i]!]!.id;
}

describe('hash ring (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  it('keeps points sorted, distinct, in range and owned by members, and places keys at the next point', () => {
    fc.assert(
      fc.property(members, ppw, keys, (ms, p, ks) => {
        const r = ring(ms, p);
        assert.equal(r.positions.length, r.size);
        for (let i = 0; i < r.size; i++) {
          assert.ok(r.positions[i]! < RING_RANGE);
          if (i > 0) assert.ok(r.positions[i - 1]! < r.positions[i]!, 'ascending and distinct');
          assert.ok(r.owners[i]! < ms.length);
        }
        for (const k of ks) {
          const at = keyPosition(k);
          const i = r.locate(k);
          const first = r.positions.findIndex((x) => x >= at);
          assert.equal(i, first < 0 ? 0 : first, `key ${JSON.stringify(k)} at ${at}`);
        }
      }),
      fuzzParams(),
    );
  });

  it('maps keys the same whatever the order of the members', () => {
    fc.assert(
      fc.property(
        members.chain((ms) =>
          fc.tuple(fc.constant(ms), fc.shuffledSubarray(ms, { minLength: ms.length, maxLength: ms.length })),
        ),
        ppw,
        keys,
        ([ms, shuffled], p, ks) => {
          const a = ring(ms, p);
          const b = ring(shuffled, p);
          for (const k of ks) assert.equal(owner(a, ms, k), owner(b, shuffled, k));
        },
      ),
      fuzzParams(),
    );
  });

  it('moves only the removed node keys when a node leaves, and keys only to a node that joins', () => {
    fc.assert(
      fc.property(
        members.filter((ms) => ms.length >= 2),
        fc.nat(),
        ppw,
        keys,
        (ms, which, p, ks) => {
          const gone = ms[which % ms.length]!;
          const rest = ms.filter((m) => m !== gone);
          const before = ring(ms, p);
          const after = ring(rest, p);
          for (const k of ks) {
            const was = owner(before, ms, k);
            const now = owner(after, rest, k);
            if (was !== gone.id) assert.equal(now, was, `key ${JSON.stringify(k)} moved off ${was}`);
            // Read backwards, the same pair is a join: keys move only to the node that joined.
            if (now !== was) assert.equal(was, gone.id);
          }
        },
      ),
      fuzzParams(),
    );
  });

  it('moves keys only to a node whose weight was raised', () => {
    fc.assert(
      fc.property(members, fc.nat(), ppw, keys, (ms, which, p, ks) => {
        const i = which % ms.length;
        const heavier = ms.map((m, j) => (j === i ? { ...m, weight: m.weight + 2 } : m));
        const before = ring(ms, p);
        const after = ring(heavier, p);
        for (const k of ks) {
          const was = owner(before, ms, k);
          const now = owner(after, heavier, k);
          if (now !== was) assert.equal(now, ms[i]!.id, `key ${JSON.stringify(k)} moved to ${now}`);
        }
      }),
      fuzzParams(),
    );
  });
});
