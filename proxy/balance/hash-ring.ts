/**
 * The consistent-hash ring: control points on `[0, RING_RANGE)`, each owned by a member slot, held
 * by the `consistent-hash` package, which defines where a key belongs. Point positions come only
 * from node ids (never random numbers or list order), so every process given the same nodes and
 * weights builds the same ring. The sorted arrays beside the package's ring are the order the
 * bounded-load walk follows, and what a lookup searches (the package's answer, without its linear
 * tail and object lookup). Keys are placed with our own stable hash (see `StableKeyRing`).
 */
import ConsistentHash from 'consistent-hash';
import { stableHash26, stableHash32 } from './stable-hash.js';

/** Default control points per unit of weight. */
export const DEFAULT_POINTS_PER_WEIGHT = 100;

/**
 * Size of the ring: positions are integers below it (2^31 - 1, a prime; the package keeps positions
 * as object keys and small integers, and takes key hashes modulo the range).
 */
export const RING_RANGE = 0x7fffffff;

/**
 * Largest ring accepted (points). The package keeps a few objects per point (about 170 bytes in
 * all, measured), so this cap is about 45 MB and a second or two of plan compile; an even spread
 * needs a few hundred points per node, i.e. this allows over 2,000 nodes at the default 100.
 */
export const MAX_RING_POINTS = 1 << 18;

/**
 * The package places a key at `(hash(key) << 5) mod range` with a 24-bit PJW hash of its own, which
 * keeps keys that differ only in their last characters (`session-41`, `session-42`) within a few
 * positions of each other, so a run of such keys lands on one node. Keys are hashed here with
 * `stableHash32` instead (every input bit reaches every output bit), cut to 26 bits so that the
 * package's `<< 5` stays a positive 31-bit integer.
 */
class StableKeyRing extends ConsistentHash<number> {
  protected override _hash(key: string): number {
    // HOT
    return stableHash26(key);
  }
}

/**
 * Where `key` lands on the ring (what the package computes from `StableKeyRing`'s hash). A 26-bit
 * hash shifted left by 5 is a multiple of 32 below 2^31, never RING_RANGE (odd): the modulo leaves
 * it as it is, so the position is `stableHash26(key) << 5`.
 */
export function keyPosition(key: string): number {
  return (stableHash26(key) << 5) % RING_RANGE;
}

/**
 * Control points on the ring. A key hashes to a position and belongs to the first point at or
 * after it, wrapping past the end to point 0:
 *
 * ```
 *   0                                                        RING_RANGE - 1
 *   |---a0-----c0------b0--------a1----h-----c1---------b1---------|
 *                                      |     ^
 *                  keyPosition(key) ───┘     └── home = owner of the first point >= h (c1 → node C)
 *   walk for bounded load: c1 (C), b1 (B), then wrap: a0 (A), ... skipping nodes already seen
 *
 *   positions: Uint32Array [a0, c0, b0, a1, c1, b1]   (sorted ascending)
 *   owners:    Uint32Array [ 0,  2,  1,  0,  2,  1]   (member slot of each point)
 *   package:   point i added as node i at positions[i]; get(key) returns i = locate(key)
 * ```
 *
 * Node `id`'s point `j` sits at `stableHash32(id + '#' + j) mod RING_RANGE`, for
 * `j < round(weight × pointsPerWeight)` (at least 1). Raising a weight adds points and keeps the old
 * ones; removing a node removes only its points, so only its keys move. Two points at one position
 * (rare) keep the one of the node whose id sorts first (code units), whatever the config order: the
 * other node has one point fewer, and adding or removing either moves only its own keys.
 */
/** Points a node of `weight` gets on the ring (at least one). */
function pointsOf(weight: number, pointsPerWeight: number): number {
  return Math.max(1, Math.round(weight * pointsPerWeight));
}

/**
 * Points a ring of nodes with these weights would have: the config check compares it with
 * `MAX_RING_POINTS` before anything is built.
 */
export function ringPoints(weights: readonly number[], pointsPerWeight = DEFAULT_POINTS_PER_WEIGHT): number {
  let total = 0;
  for (const w of weights) total += pointsOf(w, pointsPerWeight);
  return total;
}

/** Why a ring of `total` points is refused, in the config's terms. */
export function ringTooLarge(total: number): string {
  return `the consistent-hash ring would have ${total} points (at most ${MAX_RING_POINTS}): lower balance.points_per_weight or the nodes' weights`;
}

export class HashRing {
  /** Point positions, ascending, distinct (integers below RING_RANGE). */
  readonly positions: Uint32Array;
  /** Member slot owning each point (same index as `positions`). */
  readonly owners: Uint32Array;
  /** Number of points. */
  readonly size: number;
  /**
   * Index of the first point at or after the start of each of the ring's 2^k equal buckets (2^k the
   * least power of two at or above `size`; bucket j starts at position j × 2^31 / 2^k), and `size`
   * after the last: a lookup reads its bucket's points alone (one on average), not a binary search.
   */
  private readonly buckets: Uint32Array;
  /** A key's 26-bit hash shifted right by this is its bucket. */
  private readonly bucketShift: number;
  /** The package's ring: point `i` is its node `i`, so a lookup yields the index into `positions`. */
  private readonly ring: StableKeyRing;

  /**
   * Builds the ring for member slots `0..ids.length-1` with the given weights (> 0). Throws a
   * RangeError when the ring would exceed `MAX_RING_POINTS` (a config error, caught at plan compile).
   */
  constructor(ids: readonly string[], weights: ArrayLike<number>, pointsPerWeight: number) {
    const counts = ids.map((_, i) => pointsOf(weights[i] ?? 0, pointsPerWeight));
    const total = counts.reduce((a, b) => a + b, 0);
    if (total > MAX_RING_POINTS) throw new RangeError(ringTooLarge(total));
    // Nodes in id order, so a shared position goes to the same node whatever the config order.
    const slots = ids.map((_, slot) => slot).sort((a, b) => compareIds(ids[a]!, ids[b]!) || a - b);
    const owner = new Map<number, number>();
    for (const slot of slots) {
      for (let point = 0; point < counts[slot]!; point++) {
        const position = stableHash32(`${ids[slot]!}#${point}`) % RING_RANGE;
        if (!owner.has(position)) owner.set(position, slot);
      }
    }
    const sorted = [...owner.keys()].sort((a, b) => a - b);
    this.size = sorted.length;
    this.positions = Uint32Array.from(sorted);
    this.owners = Uint32Array.from(sorted, (p) => owner.get(p)!);
    let bits = 0;
    while (1 << bits < this.size && bits < 26) bits++;
    this.bucketShift = 26 - bits;
    this.buckets = new Uint32Array((1 << bits) + 1);
    for (let j = 0, i = 0; j <= 1 << bits; j++) {
      // 2^31 / 2^bits × j, without passing 2^31 through an int32.
      const start = j * 2 ** (31 - bits);
      while (i < this.size && this.positions[i]! < start) i++;
      this.buckets[j] = i;
    }
    this.ring = new StableKeyRing({ range: RING_RANGE });
    for (let i = 0; i < this.size; i++) this.ring.add(i, 1, [this.positions[i]!]);
    // The package sorts its points on the first lookup: do it now, not on the first request.
    if (this.size > 0) this.ring.get('');
  }

  /**
   * Index (into `positions`) of the point `key` belongs to, or -1 for an empty ring: the first point
   * at or after `keyPosition(key)`, wrapping to point 0. The package's `get` gives the same point
   * (`packagePoint`), at several times the cost (a binary search, then a linear scan of up to 25
   * points and a lookup in an object keyed by position).
   */
  locate(key: string): number {
    // HOT
    return this.locateHash(stableHash26(key));
  }

  /** `locate` of a key whose `stableHash26` is `hash`. */
  locateHash(hash: number): number {
    // HOT
    const size = this.size;
    if (size === 0) return -1;
    const at = hash << 5; // keyPosition(key)
    const positions = this.positions;
    const j = hash >>> this.bucketShift;
    let i = this.buckets[j]!;
    const end = this.buckets[j + 1]!;
    // Points past the bucket's are past its end, so past `at`: the search stops at the bucket's end.
    while (i < end && positions[i]! < at) i++;
    return i === size ? 0 : i;
  }

  /** The point the package's own lookup gives for `key` (-1 for an empty ring): what `locate` must equal. */
  packagePoint(key: string): number {
    const i = this.ring.get(key);
    return i === null ? -1 : i;
  }
}

/** Code-unit order (locale-independent, unlike `localeCompare`). */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
