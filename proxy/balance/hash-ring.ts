/**
 * The consistent-hash ring: sorted 32-bit control points, each owned by a member slot, with the
 * points of a node derived only from its id (never from random numbers or list order), so every
 * process that is given the same nodes and weights builds the same ring.
 */
import { stableHash32 } from './stable-hash.js';

/** Default control points per unit of weight. */
export const DEFAULT_POINTS_PER_WEIGHT = 100;
/** Largest ring accepted (points); beyond this a config asks for far more memory than it needs. */
export const MAX_RING_POINTS = 1 << 22;

/**
 * Control points on the 32-bit circle. A key hashes to a position and belongs to the first point at
 * or after it, wrapping past 2^32 - 1 to point 0:
 *
 * ```
 *   0                                                            2^32 - 1
 *   |---a0-----c0------b0--------a1----h-----c1---------b1---------|
 *                                      |     ^
 *                          key hash ───┘     └── home = owner of the first point >= h (c1 → node C)
 *   walk for bounded load: c1 (C), b1 (B), then wrap: a0 (A), ... skipping nodes already seen
 *
 *   positions: Uint32Array [a0, c0, b0, a1, c1, b1]   (sorted ascending)
 *   owners:    Uint32Array [ 0,  2,  1,  0,  2,  1]   (member slot of each point)
 * ```
 *
 * Node `id`'s point `j` sits at `stableHash32(id + '#' + j)`, for `j < round(weight ×
 * pointsPerWeight)` (at least 1). Raising a weight adds points and keeps the old ones; removing a
 * node removes only its points, so only its keys move.
 */
export class HashRing {
  /** Point positions, ascending (unsigned 32-bit hash values). */
  readonly positions: Uint32Array;
  /** Member slot owning each point (same index as `positions`). */
  readonly owners: Uint32Array;
  /** Number of points. */
  readonly size: number;

  /**
   * Builds the ring for member slots `0..ids.length-1` with the given weights (> 0). Throws a
   * RangeError when the ring would exceed `MAX_RING_POINTS` (a config error, caught at plan compile).
   */
  constructor(ids: readonly string[], weights: ArrayLike<number>, pointsPerWeight: number) {
    const counts = ids.map((_, i) => Math.max(1, Math.round((weights[i] ?? 0) * pointsPerWeight)));
    const total = counts.reduce((a, b) => a + b, 0);
    if (total > MAX_RING_POINTS) {
      throw new RangeError(
        `consistent-hash ring would have ${total} points (max ${MAX_RING_POINTS}); lower pointsPerWeight or the weights`,
      );
    }
    const entries: { position: number; id: string; point: number; slot: number }[] = [];
    ids.forEach((id, slot) => {
      for (let point = 0; point < counts[slot]!; point++) {
        entries.push({ position: stableHash32(`${id}#${point}`), id, point, slot });
      }
    });
    // Equal positions (rare) are ordered by node id and point index, never by list order, so the
    // member order in the config cannot change which node owns a key.
    entries.sort((a, b) => a.position - b.position || compareIds(a.id, b.id) || a.point - b.point);
    this.size = entries.length;
    this.positions = Uint32Array.from(entries, (e) => e.position);
    this.owners = Uint32Array.from(entries, (e) => e.slot);
  }

  /** Index of the first point at or after `hash` (wrapping to 0), or -1 for an empty ring. */
  locate(hash: number): number {
    // HOT
    const positions = this.positions;
    const n = this.size;
    if (n === 0) return -1;
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (positions[mid]! < hash) lo = mid + 1;
      else hi = mid;
    }
    return lo === n ? 0 : lo;
  }
}

/** Code-unit order (locale-independent, unlike `localeCompare`). */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
