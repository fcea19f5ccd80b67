/**
 * The per-node decaying average of time to first byte that least-response-time scores with. The
 * session feeds it one sample per response head; only this file writes `node.ttfbEwmaMs` and
 * `node.ttfbUpdatedMs` (besides a reset to -1 by whoever wants a node re-probed).
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Default half-life of a TTFB sample's weight, ms. */
export const DEFAULT_TTFB_HALF_LIFE_MS = 10_000;

/**
 * Records one time-to-first-byte sample of `ms` taken at monotonic time `nowMs`.
 *
 * The average is a time-decayed mean: every sample's weight halves every `halfLifeMs`, and the
 * average is the weighted mean of all samples so far. So a sample that arrives `halfLifeMs` after
 * a lone first sample counts 2/3 (weights 0.5 and 1), and samples that arrive together count
 * equally (a GPU's continuous batching emits first tokens in bursts; a per-gap EWMA would ignore
 * every sample of a burst but the first). The first sample, or the first after `ttfbEwmaMs` was
 * reset to -1, sets the average. Negative or non-finite samples are ignored; `halfLifeMs <= 0`
 * keeps only the latest sample.
 */
export function recordTtfb(node: UpstreamNode, ms: number, nowMs: number, halfLifeMs: number): void {
  // HOT
  if (!(ms >= 0 && ms < Infinity)) return;
  // A value someone set directly (weight still 0) counts as one sample.
  if (node.ttfbWeight <= 0 && node.ttfbEwmaMs >= 0) node.ttfbWeight = 1;
  if (node.ttfbEwmaMs < 0 || node.ttfbWeight <= 0) {
    node.ttfbEwmaMs = ms;
    node.ttfbUpdatedMs = nowMs;
    node.ttfbWeight = 1;
    return;
  }
  const elapsed = nowMs - node.ttfbUpdatedMs;
  const keep = halfLifeMs > 0 ? (elapsed > 0 ? Math.pow(2, -elapsed / halfLifeMs) : 1) : 0;
  const old = node.ttfbWeight * keep;
  const total = old + 1;
  node.ttfbEwmaMs = (node.ttfbEwmaMs * old + ms) / total;
  node.ttfbWeight = total;
  // Samples may be recorded slightly out of order; time never moves backwards for the average.
  if (nowMs > node.ttfbUpdatedMs) node.ttfbUpdatedMs = nowMs;
}

/**
 * The decayed weight of the samples behind `node.ttfbEwmaMs` as of its last update (0 when
 * unprobed): how much evidence the average rests on. For tests and diagnostics.
 */
export function ttfbSampleWeight(node: UpstreamNode): number {
  if (node.ttfbEwmaMs < 0) return 0;
  return node.ttfbWeight > 0 ? node.ttfbWeight : 1;
}
