/**
 * The summary of a multi-variant run: one line per variant with what routing decides, side by
 * side (throughput, prefix-cache hit rate, TTFT p50/p99/p99.9, end-to-end p50/p99, the busiest
 * node's share), and each figure's ratio to the first variant. Formatting only.
 */

import type { LoadtestResult } from './result.js';
import { fmtMs, fmtNum, fmtPct, textTable } from './text-table.js';
import { hasThinMark, markThin, THIN_TAIL_LEGEND } from './thin-tail.js';

/** A value with its ratio to the baseline's, `812.0 (0.61×)`; the baseline itself without one. */
function withRatio(text: string, v: number | null, base: number | null, first: boolean): string {
  if (first || v === null || base === null || base === 0) return text;
  return `${text} (${(v / base).toFixed(2)}×)`;
}

/** The summary lines: a header naming the scenario, then one row per variant. */
export function renderVariantsSummary(results: readonly LoadtestResult[]): string[] {
  const base = results[0];
  if (base === undefined) return [];
  const rows = [
    [
      'variant',
      'ok/s',
      'hit rate',
      'TTFT p50',
      'TTFT p99',
      'TTFT p99.9',
      'e2e p50',
      'e2e p99',
      'busiest node',
    ],
  ];
  const share = (r: LoadtestResult): number | null =>
    r.nodes.length === 0 ? null : Math.max(...r.nodes.map((n) => n.share));
  results.forEach((r, i) => {
    const first = i === 0;
    const t = r.latency_ms.ttft;
    const e = r.latency_ms.e2e;
    const bt = base.latency_ms.ttft;
    const be = base.latency_ms.e2e;
    rows.push([
      r.variant,
      fmtNum(r.requests.ok_per_s),
      withRatio(fmtPct(r.prefix_cache.hit_rate), r.prefix_cache.hit_rate, base.prefix_cache.hit_rate, first),
      withRatio(markThin(fmtMs(t.p50_ms), 50, t.count), t.p50_ms, bt.p50_ms, first),
      withRatio(markThin(fmtMs(t.p99_ms), 99, t.count), t.p99_ms, bt.p99_ms, first),
      withRatio(markThin(fmtMs(t.p999_ms), 99.9, t.count), t.p999_ms, bt.p999_ms, first),
      withRatio(markThin(fmtMs(e.p50_ms), 50, e.count), e.p50_ms, be.p50_ms, first),
      withRatio(markThin(fmtMs(e.p99_ms), 99, e.count), e.p99_ms, be.p99_ms, first),
      fmtPct(share(r)),
    ]);
  });
  return [
    `${base.scenario}: variants side by side (latencies in ms; ratio to ${base.variant})`,
    ...textTable(rows),
    ...(hasThinMark(rows) ? [THIN_TAIL_LEGEND] : []),
  ];
}
