/**
 * Seeded randomness for deterministic outputs: a seed derived from a text by SHA-256 and the sfc32
 * generator (a small 128-bit-state PRNG). Nothing here may read `Math.random`, or outputs would stop
 * being reproducible from their input.
 */

import { createHash } from 'node:crypto';

/** A deterministic pseudo-random generator (sfc32) with 128 bits of state. */
export class SeededRandom {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** Seeds from four 32-bit words; use `fromText` to seed from a string. */
  constructor(a: number, b: number, c: number, d: number) {
    this.a = a >>> 0;
    this.b = b >>> 0;
    this.c = c >>> 0;
    this.d = d >>> 0;
    // The first outputs of sfc32 are weakly mixed; discard a few.
    for (let i = 0; i < 12; i++) this.nextUint32();
  }

  /** A generator seeded by the SHA-256 of `text` (UTF-8). Same text, same sequence, on every platform. */
  static fromText(text: string): SeededRandom {
    const digest = createHash('sha256').update(text, 'utf8').digest();
    return new SeededRandom(
      digest.readUInt32LE(0),
      digest.readUInt32LE(4),
      digest.readUInt32LE(8),
      digest.readUInt32LE(12),
    );
  }

  /** The next 32-bit unsigned integer. */
  nextUint32(): number {
    const t0 = (this.a + this.b) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.d = (this.d + 1) | 0;
    const t = (t0 + this.d) | 0;
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** A float in [0, 1). */
  nextFloat(): number {
    return this.nextUint32() / 4294967296;
  }

  /** An integer in [0, n). */
  nextInt(n: number): number {
    return Math.floor(this.nextFloat() * n);
  }

  /** A standard normal deviate (Box–Muller; one of the pair is discarded for simplicity). */
  nextGaussian(): number {
    const u = 1 - this.nextFloat(); // (0, 1], keeps log finite
    const v = this.nextFloat();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
}
