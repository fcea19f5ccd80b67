/**
 * Types of the `consistent-hash` npm package (v1.2, CommonJS, no types of its own), limited to what
 * `hash-ring.ts` uses. See docs/balancing.md for how the ring uses it.
 */
declare module 'consistent-hash' {
  /** Options of the ring. */
  interface ConsistentHashOptions {
    /** Control points are integers in [0, range); keys hash into the same range. Default 100003. */
    range?: number;
  }

  /** A hash ring of control points, each owned by a node value given to `add`. */
  class ConsistentHash<T = unknown> {
    constructor(options?: ConsistentHashOptions);
    /** Adds `node` with the given control points (`weight` is ignored when `points` is given). */
    add(node: T, weight: number, points: readonly number[]): this;
    /** The node owning the first control point at or after `key`'s hash (wrapping), or null when empty. */
    get(key: string): T | null;
    /** Number of control points. */
    readonly keyCount: number;
    /**
     * The key hash `get` places keys with (a 24-bit PJW hash by default), multiplied by 32 and
     * taken modulo the range. Undocumented but a plain prototype method; `hash-ring.ts` overrides
     * it in a subclass, and `test/balance/hash-ring.test.ts` checks that the override is in effect.
     */
    protected _hash(key: string): number;
  }

  export = ConsistentHash;
}
