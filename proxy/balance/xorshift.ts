/**
 * A tiny seedable pseudo-random generator (Marsaglia's xorshift32) for randomised balancing
 * decisions. Not for anything security-related; its point is speed, no allocation and exact
 * replay in tests from a seed.
 */

/** Mutable xorshift32 state; one per policy instance. */
export class Xorshift32 {
  /**
   * Current state, a non-zero 32-bit pattern kept as a *signed* int32: values >= 2^31 stored as
   * unsigned would not fit a small integer and would box a heap number on every step.
   */
  private state: number;

  /** `seed` is reduced to 32 bits; 0 (a fixed point of xorshift) is replaced by a constant. */
  constructor(seed: number) {
    const s = seed | 0;
    this.state = s === 0 ? 0x9e3779b9 | 0 : s;
  }

  /** Next value, uniform over [1, 2^32 - 1]. */
  nextUint32(): number {
    // HOT
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x;
    return x >>> 0;
  }

  /** Next value, uniform over [0, 1). */
  nextFloat(): number {
    // HOT
    return (this.nextUint32() - 1) / 4294967295;
  }
}

/** A seed that differs between processes, for policies built without an explicit seed. */
export function randomSeed(): number {
  return (Math.random() * 4294967296) >>> 0;
}
