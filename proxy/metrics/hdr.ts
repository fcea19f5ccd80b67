/**
 * Builds the HdrHistograms every recorder uses: hdr-histogram-js compiled to WebAssembly (recording
 * is one call into the module, about five times cheaper than the JavaScript build), a fixed range
 * that never resizes, and values the caller clamps into that range. Owns the value scales; it
 * records nothing itself.
 */
import { build, initWebAssemblySync, type Histogram } from 'hdr-histogram-js';

initWebAssemblySync();

/** What a histogram measures: its unit and the range it covers. */
export interface HdrScale {
  /** Smallest value recorded (values below are raised to it). */
  readonly lowest: number;
  /** Largest value recorded (values above are lowered to it). */
  readonly highest: number;
  /** Multiply a recorded value by this to get the base unit (seconds, tokens, items). */
  readonly toBase: number;
}

/** Latencies in microseconds, 1 µs to 1 hour. */
export const LATENCY_US: HdrScale = Object.freeze({ lowest: 1, highest: 3_600_000_000, toBase: 1e-6 });
/** Counts (tokens, items), 1 to 16 million. */
export const COUNT: HdrScale = Object.freeze({ lowest: 1, highest: 16_777_216, toBase: 1 });

/**
 * A fixed-range WebAssembly histogram. `digits` significant decimal digits (2: relative error
 * under 0.8 %; 3: under 0.1 %); `bits` per count (32 for short windows, 64 for totals that must not
 * overflow). Free it with `destroy()`.
 */
export function buildHdr(scale: HdrScale, digits: 2 | 3, bits: 32 | 64): Histogram {
  return build({
    lowestDiscernibleValue: scale.lowest,
    highestTrackableValue: scale.highest,
    numberOfSignificantValueDigits: digits,
    bitBucketSize: bits,
    autoResize: false,
    useWebAssembly: true,
  });
}

/** Rounds `v` to an integer inside `scale` (HdrHistogram records integers in a fixed range). */
export function clampToScale(v: number, scale: HdrScale): number {
  // HOT
  const x = Math.round(v);
  return x < scale.lowest ? scale.lowest : x > scale.highest ? scale.highest : x;
}
