/**
 * One measured quantity kept twice: since start, and over a sliding window of the last few slices
 * (the last 60 s in 10 s slices by default), so that percentiles show now and not the average of
 * the day. Recording touches only the current slice, the Prometheus bucket counters and the sum;
 * merging happens when a slice closes (`rotate`, on a timer) and when someone reads.
 *
 * ```
 *  slices (ring)   [s0][s1][s2][s3][s4][s5]      record() -> cur only
 *                        ^cur
 *  rotate():  window += cur;  cur = oldest;  window -= oldest;  retired += oldest;  oldest.reset()
 *  window view  = window + cur            (the last `slices` slices, the newest one partial)
 *  since start  = retired + window + cur
 * ```
 *
 * With one slice the closed slice is the one that reopens: `rotate` moves it to `retired` and
 * empties it, `window` stays empty, and the window view is the current (partial) slice only.
 */
import { decodeFromCompressedBase64, encodeIntoCompressedBase64, type Histogram } from 'hdr-histogram-js';
import { buildHdr, clampToScale, LATENCY_US, type HdrScale } from './hdr.js';

/**
 * What a worker thread recorded in one histogram since its last report (`takeDelta`), for the main
 * thread to add to its own (`absorb`): the values (HdrHistogram, compressed), the Prometheus
 * bucket counts, their sum and count.
 */
export interface HistogramDelta {
  hdr: string;
  buckets: number[];
  sum: number;
  count: number;
}

/** Window of every series: `slices` slices of `sliceMs` each. */
export interface WindowShape {
  readonly slices: number;
  /** Length of one slice, ms. */
  readonly sliceMs: number;
}

/** Percentiles of one view, in the base unit (seconds, tokens, items); zeros when empty. */
export interface PercentileSummary {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Absorbs what destroyed histograms still receive from requests that started before a reload. */
let discard: Histogram | null = null;

export class WindowedHistogram {
  readonly scale: HdrScale;
  /** Prometheus bucket upper bounds in recorded units, ascending. */
  readonly bounds: Float64Array;
  /** Since start: values per bucket (not cumulative); the last entry is above every bound. */
  readonly buckets: Float64Array;
  /** Since start: sum of recorded values, recorded units. */
  sum = 0;
  /** Since start: values recorded. */
  count = 0;
  private cur: Histogram;
  private readonly slices: Histogram[];
  private head = 0;
  /** The closed slices still inside the window. */
  private readonly window: Histogram;
  /** Slices that left the window (64-bit counts: since start never overflows). */
  private readonly retired: Histogram;
  private destroyed = false;

  /** `boundsBase`: Prometheus bucket bounds in the base unit (seconds, tokens). */
  constructor(scale: HdrScale, boundsBase: readonly number[], shape: WindowShape) {
    this.scale = scale;
    this.bounds = Float64Array.from(boundsBase, (b) => b / scale.toBase);
    this.buckets = new Float64Array(boundsBase.length + 1);
    this.slices = [];
    for (let i = 0; i < shape.slices; i++) this.slices.push(buildHdr(scale, 2, 32));
    this.cur = this.slices[0]!;
    this.window = buildHdr(scale, 2, 32);
    this.retired = buildHdr(scale, 2, 64);
  }

  /** Records one value in recorded units (µs for latencies). Allocation-free. */
  record(value: number): void {
    // HOT
    const v = clampToScale(value, this.scale);
    this.cur.recordValue(v);
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]!) i++;
    this.buckets[i] = this.buckets[i]! + 1;
    this.sum += v;
    this.count++;
  }

  /** Closes the current slice and opens the oldest one, emptied (called once per slice length). */
  rotate(): void {
    if (this.destroyed) return;
    const closed = this.cur;
    if (this.slices.length === 1) {
      // One slice: the window is the current slice only. The closed slice leaves the window as it
      // closes (it never joins `window`) and is reopened empty.
      if (closed.totalCount > 0) {
        this.retired.add(closed);
        closed.reset();
      }
      return;
    }
    if (closed.totalCount > 0) this.window.add(closed);
    this.head = (this.head + 1) % this.slices.length;
    const oldest = this.slices[this.head]!;
    if (oldest.totalCount > 0) {
      this.window.subtract(oldest);
      this.retired.add(oldest);
      oldest.reset();
    }
    this.cur = oldest;
  }

  /** Values recorded in the window (the last `slices` slices). */
  get windowCount(): number {
    return this.window.totalCount + this.cur.totalCount;
  }

  /** Adds the window's values to `acc` (a 64-bit histogram of the same scale). */
  addWindowTo(acc: Histogram): void {
    if (this.destroyed) return;
    if (this.window.totalCount > 0) acc.add(this.window);
    if (this.cur.totalCount > 0) acc.add(this.cur);
  }

  /** Adds every value since start to `acc` (a 64-bit histogram of the same scale). */
  addTotalTo(acc: Histogram): void {
    this.addWindowTo(acc);
    if (!this.destroyed && this.retired.totalCount > 0) acc.add(this.retired);
  }

  /**
   * A worker thread's side (its series never rotate: the main thread keeps the windows): what was
   * recorded since the last call, or null if nothing was; then forgets it.
   */
  takeDelta(): HistogramDelta | null {
    if (this.count === 0 || this.destroyed) return null;
    const d: HistogramDelta = {
      hdr: encodeIntoCompressedBase64(this.cur),
      buckets: Array.from(this.buckets),
      sum: this.sum,
      count: this.count,
    };
    this.cur.reset();
    this.buckets.fill(0);
    this.sum = 0;
    this.count = 0;
    return d;
  }

  /** The main thread's side: adds what a worker recorded, as if recorded here now. */
  absorb(d: HistogramDelta): void {
    if (this.destroyed || d.buckets.length !== this.buckets.length) return;
    const h = decodeFromCompressedBase64(d.hdr, 64, true);
    try {
      this.cur.add(h);
    } finally {
      h.destroy();
    }
    for (let i = 0; i < d.buckets.length; i++) this.buckets[i] = this.buckets[i]! + d.buckets[i]!;
    this.sum += d.sum;
    this.count += d.count;
  }

  /** Frees the WebAssembly memory. Later records are discarded (a request that started before a reload). */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    // The widest scale, so that any clamped value fits.
    discard ??= buildHdr(LATENCY_US, 2, 64);
    for (const s of this.slices) s.destroy();
    this.window.destroy();
    this.retired.destroy();
    this.cur = discard;
  }
}

/** A 64-bit histogram to merge views into (`addWindowTo`, `addTotalTo`). */
export function scratchHistogram(scale: HdrScale): Histogram {
  return buildHdr(scale, 2, 64);
}

/** Percentiles of `h` converted to the base unit of `scale`. */
export function summarize(h: Histogram, scale: HdrScale): PercentileSummary {
  const n = h.totalCount;
  if (n === 0) return { count: 0, p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0 };
  const k = scale.toBase;
  const max = h.maxValue;
  // A percentile is reported as the top of its bucket; never above the largest value seen.
  const at = (p: number): number => Math.min(h.getValueAtPercentile(p), max) * k;
  return { count: n, p50: at(50), p90: at(90), p99: at(99), p999: at(99.9), max: max * k, mean: h.mean * k };
}
