/**
 * Tail percentiles with too few samples behind them (p99.9 of 218 samples is just their max) are
 * marked `*` with a legend in the run report, the variants summary and `compare`, which also shows
 * the sample counts. The JSON result keeps the values as computed.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareResults, renderComparison } from '../../loadtest/report/compare.js';
import { renderReport } from '../../loadtest/report/report-table.js';
import type { LatencySummary, LoadtestResult } from '../../loadtest/report/result.js';
import { samplesFor, THIN_TAIL_LEGEND, tooFewFor } from '../../loadtest/report/thin-tail.js';
import { renderVariantsSummary } from '../../loadtest/report/variants-table.js';

function latency(count: number, scale = 1): LatencySummary {
  if (count === 0) {
    return { count, mean_ms: null, p50_ms: null, p90_ms: null, p99_ms: null, p999_ms: null, max_ms: null };
  }
  return {
    count,
    mean_ms: 12 * scale,
    p50_ms: 10 * scale,
    p90_ms: 20 * scale,
    p99_ms: 40 * scale,
    p999_ms: 80 * scale,
    max_ms: 80 * scale,
  };
}

/** A complete result whose e2e and TTFT series hold `count` samples. */
function result(variant: string, count: number, scale = 1): LoadtestResult {
  return {
    format: 'sluice-loadtest-result/1',
    scenario: 'thin',
    variant,
    description: '',
    file: 'thin.yaml',
    started_at: '2026-01-01T00:00:00.000Z',
    seed: 1,
    load: {
      mode: 'open',
      driver: 'open-loop',
      rate_per_s: 10,
      arrivals: 'uniform',
      connections: null,
      max_in_flight: 4096,
    },
    target: {
      kind: 'direct',
      urls: ['http://127.0.0.1:1'],
      sluice_cpu_ms: null,
      sluice_cpu_us_per_request: null,
    },
    fleet: null,
    duration_s: 10,
    wall_s: 11,
    requests: {
      total: count,
      ok: count,
      errors: 0,
      offered_per_s: count / 10,
      ok_per_s: count / 10,
      stream_tokens_per_s: 0,
    },
    latency_ms: {
      e2e: latency(count, scale),
      ttft: latency(count, scale / 2),
      itl: latency(0),
      send_lag: latency(count, 0.01),
    },
    statuses: { '200': count },
    errors: {},
    tenants: [],
    kinds: [],
    nodes: [],
    prefix_cache: { query_tokens: 0, hit_tokens: 0, hit_rate: null },
    sessions: { started: 0, overflows: 0 },
    generator: { peak_in_flight: 1 },
    timeline: [],
    histograms: { e2e: '', ttft: '' },
    stopped_early: null,
  };
}

/** The cells of the line starting with `label`, split on runs of two or more spaces. */
function cells(lines: readonly string[], label: string): string[] {
  const line = lines.find((l) => l.startsWith(label));
  assert.ok(line !== undefined, `no line starting with "${label}" in:\n${lines.join('\n')}`);
  return line.split(/\s{2,}/);
}

describe('percentiles with too few samples', () => {
  it('need 1 / (1 − p) samples: 2 for p50, 100 for p99, 1,000 for p99.9', () => {
    assert.deepEqual([50, 90, 99, 99.9].map(samplesFor), [2, 10, 100, 1000]);
    assert.equal(tooFewFor(99.9, 218), true);
    assert.equal(tooFewFor(99.9, 999), true);
    assert.equal(tooFewFor(99.9, 1000), false);
    assert.equal(tooFewFor(99, 218), false);
    assert.equal(tooFewFor(50, 1), true);
    assert.equal(tooFewFor(50, 0), false, 'an empty series prints "-", unmarked');
  });

  it('are marked in the run report, with the legend', () => {
    const lines = renderReport(result('a', 218));
    assert.deepEqual(cells(lines, 'end to end'), [
      'end to end',
      '10.0',
      '20.0',
      '40.0',
      '80.0*',
      '80.0',
      '12.0',
      '218',
    ]);
    assert.equal(cells(lines, 'TTFT')[4], '40.0*');
    assert.ok(lines.includes(THIN_TAIL_LEGEND));
    const enough = renderReport(result('a', 1000));
    assert.equal(cells(enough, 'end to end')[4], '80.0');
    assert.equal(enough.includes(THIN_TAIL_LEGEND), false);
  });

  it('are marked in the variants summary, with the legend', () => {
    const lines = renderVariantsSummary([result('a', 5000), result('b', 218, 2), result('c', 50)]);
    assert.equal(cells(lines, 'a ')[5], '40.0');
    assert.equal(cells(lines, 'b ')[5], '80.0* (2.00×)');
    assert.equal(cells(lines, 'b ')[4], '40.0 (2.00×)');
    assert.equal(cells(lines, 'c ')[4], '20.0* (1.00×)', 'TTFT p99 of 50 samples');
    assert.equal(lines.at(-1), THIN_TAIL_LEGEND);
  });

  it('are marked in compare, which shows the sample counts', () => {
    const a = result('a', 5000);
    const b = result('b', 218, 48.55);
    const rows = compareResults(a, b);
    const p999 = rows.find((r) => r.metric === 'TTFT p99.9');
    assert.deepEqual(p999?.thin, { a: false, b: true });
    assert.deepEqual(rows.find((r) => r.metric === 'TTFT p99')?.thin, { a: false, b: false });
    const lines = renderComparison(a, b, rows);
    assert.deepEqual(cells(lines, 'e2e count'), ['e2e count', '5,000', '218', '0.04']);
    assert.deepEqual(cells(lines, 'TTFT count'), ['TTFT count', '5,000', '218', '0.04']);
    assert.deepEqual(cells(lines, 'TTFT p99.9 (ms)'), ['TTFT p99.9 (ms)', '40.0', '1942*', '48.55']);
    assert.equal(lines.at(-1), THIN_TAIL_LEGEND);
    const plain = renderComparison(a, a, compareResults(a, a));
    assert.equal(plain.includes(THIN_TAIL_LEGEND), false);
  });
});
