/**
 * Consistent-hash ring lookups, 16 nodes × 100 points, keys as the prompt-prefix source makes them
 * (8 hex digits): `HashRing.locate` (in use: our key hash, then the ring's bucket table), the sorted
 * typed array with a binary search that the ring was before the package, and the package with its
 * own key hash (not used: it bunches similar keys together; see docs/balancing.md).
 */
import ConsistentHash from 'consistent-hash';
import { HashRing } from '../../proxy/balance/hash-ring.js';
import { stableHash32, stableHashHex } from '../../proxy/balance/stable-hash.js';
import type { MicroBenchmark } from './micro-benchmark.js';

const NODES = 16;
const POINTS = 100;
const IDS = Array.from({ length: NODES }, (_, i) => `http://10.0.0.${i + 1}:8000`);
const KEYS = Array.from({ length: 1024 }, (_, i) => stableHashHex(`session-${i}`));

/** The ring before the package: sorted 32-bit positions, binary search on `stableHash32(key)`. */
class TypedArrayRing {
  private readonly positions: Uint32Array;
  constructor() {
    const all: number[] = [];
    for (const id of IDS) for (let j = 0; j < POINTS; j++) all.push(stableHash32(`${id}#${j}`));
    this.positions = Uint32Array.from(all.sort((a, b) => a - b));
  }

  locate(key: string): number {
    const positions = this.positions;
    const h = stableHash32(key);
    let lo = 0;
    let hi = positions.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (positions[mid]! < h) lo = mid + 1;
      else hi = mid;
    }
    return lo === positions.length ? 0 : lo;
  }
}

function lookup(name: string, build: () => (key: string) => unknown): MicroBenchmark {
  return {
    name: `balance: ring lookup, ${name}, ${NODES} nodes × ${POINTS} points`,
    allocationFree: true,
    setup() {
      const locate = build();
      let i = 0;
      return () => locate(KEYS[i++ & 1023]!);
    },
  };
}

export const benchmarks: MicroBenchmark[] = [
  lookup('HashRing.locate, stable key hash and bucket table (in use)', () => {
    const ring = new HashRing(
      IDS,
      IDS.map(() => 1),
      POINTS,
    );
    return (key) => ring.locate(key);
  }),
  lookup('sorted typed array + binary search (before the package)', () => {
    const ring = new TypedArrayRing();
    return (key) => ring.locate(key);
  }),
  lookup('consistent-hash package with its own key hash (not used)', () => {
    const ring = new ConsistentHash<number>();
    IDS.forEach((id, slot) =>
      ring.add(
        slot,
        POINTS,
        Array.from({ length: POINTS }, (_, j) => stableHash32(`${id}#${j}`) % 100_003),
      ),
    );
    return (key) => ring.get(key);
  }),
];
