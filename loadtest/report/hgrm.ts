/**
 * HdrHistogram percentile-distribution text (`.hgrm`, the output of `outputPercentileDistribution`
 * that HdrHistogram's plotter reads), in milliseconds, from a result's encoded histogram.
 */

import { decodeFromCompressedBase64, type Histogram } from 'hdr-histogram-js';

/** Reporting points per halving of the remaining distance to 100%, as in HdrHistogram's examples. */
const TICKS_PER_HALF = 5;

/** Decodes a histogram stored in a result (µs values). */
export function decodeHistogram(base64: string): Histogram {
  return decodeFromCompressedBase64(base64);
}

/** The `.hgrm` text of `h` (recorded in µs), values printed in milliseconds. */
export function hgrmText(h: Histogram): string {
  return h.outputPercentileDistribution(TICKS_PER_HALF, 1000);
}
