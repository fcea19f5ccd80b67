/**
 * An HDR histogram of latencies in microseconds (1 µs to 1 h, 3 significant digits), fed from the
 * monotonic clock: the per-route summaries since start. Recording is O(1) and allocation-free;
 * percentiles are read by the exporter.
 */
import { decodeFromCompressedBase64, encodeIntoCompressedBase64, type Histogram } from 'hdr-histogram-js';
import { buildHdr, LATENCY_US } from './hdr.js';

const HIGHEST_US = LATENCY_US.highest;

export class LatencyRecorder {
  private readonly histogram: Histogram;
  /** Sum of recorded values in seconds, for Prometheus `_sum`. */
  sumSeconds = 0;

  constructor() {
    this.histogram = buildHdr(LATENCY_US, 3, 64);
  }

  /** Records one duration given in milliseconds (fractional, from `performance.now()` deltas). */
  recordMs(ms: number): void {
    // HOT
    let us = Math.round(ms * 1000);
    if (us < 1) us = 1;
    else if (us > HIGHEST_US) us = HIGHEST_US;
    this.histogram.recordValue(us);
    this.sumSeconds += ms / 1000;
  }

  get count(): number {
    return this.histogram.totalCount;
  }

  /** A worker thread's side: the values since the last call (compressed) and their sum, then forgets them. */
  takeDelta(): { hdr: string; sumSeconds: number } | null {
    if (this.histogram.totalCount === 0) return null;
    const d = { hdr: encodeIntoCompressedBase64(this.histogram), sumSeconds: this.sumSeconds };
    this.histogram.reset();
    this.sumSeconds = 0;
    return d;
  }

  /** The main thread's side: adds what a worker recorded (`takeDelta`). */
  absorb(d: { hdr: string; sumSeconds: number }): void {
    const h = decodeFromCompressedBase64(d.hdr, 64, true);
    try {
      this.histogram.add(h);
    } finally {
      h.destroy();
    }
    this.sumSeconds += d.sumSeconds;
  }

  /** Value at a percentile (0–100), in seconds. */
  percentileSeconds(p: number): number {
    return this.histogram.getValueAtPercentile(p) / 1e6;
  }
}
