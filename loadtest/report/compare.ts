/**
 * `sluice loadtest compare a.json b.json`: two results side by side with the ratio b / a for each
 * figure (throughput, errors, latency percentiles, cache hit rate, node balance, Sluice CPU, per-tenant
 * tails), for A/B comparisons of configs. Reads result files; computes; formats.
 */

import { readFile } from 'node:fs/promises';
import { LoadtestError, LoadtestErrorCode } from '../loadtest-error.js';
import { RESULT_FORMAT, type LatencySummary, type LoadtestResult } from './result.js';
import { fmtMs, fmtNum, fmtPct, textTable } from './text-table.js';
import { THIN_TAIL_LEGEND, tooFewFor } from './thin-tail.js';

/** One compared figure. */
export interface CompareRow {
  metric: string;
  a: number | null;
  b: number | null;
  /** b / a; null when either is missing or a is 0. */
  ratio: number | null;
  /** How to print the values. */
  unit: 'ms' | 'per_s' | 'fraction' | 'us' | 'count';
  /** Per side: a percentile with too few samples behind it, so only the largest sample (printed with `*`). */
  thin: { a: boolean; b: boolean };
}

/** Neither side is marked. */
const NOT_THIN: CompareRow['thin'] = { a: false, b: false };

/** b / a, or null when undefined. */
export function ratioOf(a: number | null, b: number | null): number | null {
  return a === null || b === null || a === 0 ? null : b / a;
}

function row(
  metric: string,
  unit: CompareRow['unit'],
  a: number | null,
  b: number | null,
  thin = NOT_THIN,
): CompareRow {
  return { metric, a, b, ratio: ratioOf(a, b), unit, thin };
}

/** Percentile `p` of two series of `countA` and `countB` samples, each side marked when too few. */
function percentileRow(
  metric: string,
  p: number,
  a: number | null,
  b: number | null,
  countA: number,
  countB: number,
): CompareRow {
  return row(metric, 'ms', a, b, { a: tooFewFor(p, countA), b: tooFewFor(p, countB) });
}

function latencyRows(name: string, a: LatencySummary, b: LatencySummary): CompareRow[] {
  if (a.count === 0 && b.count === 0) return [];
  return [
    row(`${name} count`, 'count', a.count, b.count),
    percentileRow(`${name} p50`, 50, a.p50_ms, b.p50_ms, a.count, b.count),
    percentileRow(`${name} p90`, 90, a.p90_ms, b.p90_ms, a.count, b.count),
    percentileRow(`${name} p99`, 99, a.p99_ms, b.p99_ms, a.count, b.count),
    percentileRow(`${name} p99.9`, 99.9, a.p999_ms, b.p999_ms, a.count, b.count),
    row(`${name} max`, 'ms', a.max_ms, b.max_ms),
  ];
}

function errorRate(r: LoadtestResult): number {
  return r.requests.total === 0 ? 0 : r.requests.errors / r.requests.total;
}

function maxShare(r: LoadtestResult): number | null {
  return r.nodes.length === 0 ? null : Math.max(...r.nodes.map((n) => n.share));
}

function meanUtilisation(r: LoadtestResult): number | null {
  const u = r.nodes.map((n) => n.utilisation).filter((x) => x !== null);
  return u.length === 0 ? null : u.reduce((s, x) => s + x, 0) / u.length;
}

/** The figures of `a` and `b` side by side. Tenants are matched by name. */
export function compareResults(a: LoadtestResult, b: LoadtestResult): CompareRow[] {
  const rows: CompareRow[] = [
    row('ok requests/s', 'per_s', a.requests.ok_per_s, b.requests.ok_per_s),
    row('offered requests/s', 'per_s', a.requests.offered_per_s, b.requests.offered_per_s),
    row('error rate', 'fraction', errorRate(a), errorRate(b)),
    ...latencyRows('e2e', a.latency_ms.e2e, b.latency_ms.e2e),
    ...latencyRows('TTFT', a.latency_ms.ttft, b.latency_ms.ttft),
  ];
  const [ia, ib] = [a.latency_ms.itl, b.latency_ms.itl];
  if (ia.count > 0 || ib.count > 0) {
    rows.push(row('inter-token count', 'count', ia.count, ib.count));
    rows.push(percentileRow('inter-token p50', 50, ia.p50_ms, ib.p50_ms, ia.count, ib.count));
    rows.push(percentileRow('inter-token p99', 99, ia.p99_ms, ib.p99_ms, ia.count, ib.count));
  }
  rows.push(row('prefix cache hit rate', 'fraction', a.prefix_cache.hit_rate, b.prefix_cache.hit_rate));
  rows.push(row('mean node utilisation', 'fraction', meanUtilisation(a), meanUtilisation(b)));
  rows.push(row('busiest node share', 'fraction', maxShare(a), maxShare(b)));
  rows.push(
    row(
      'sluice CPU µs/request',
      'us',
      a.target.sluice_cpu_us_per_request,
      b.target.sluice_cpu_us_per_request,
    ),
  );
  for (const ta of a.tenants) {
    const tb = b.tenants.find((t) => t.name === ta.name);
    if (tb === undefined || a.tenants.length < 2) continue;
    rows.push(row(`tenant ${ta.name} e2e p99`, 'ms', ta.e2e_p99_ms, tb.e2e_p99_ms));
    if (ta.ttft_p99_ms !== null || tb.ttft_p99_ms !== null)
      rows.push(row(`tenant ${ta.name} TTFT p99`, 'ms', ta.ttft_p99_ms, tb.ttft_p99_ms));
  }
  return rows;
}

function fmt(v: number | null, unit: CompareRow['unit']): string {
  if (unit === 'fraction') return fmtPct(v);
  if (unit === 'ms') return fmtMs(v);
  return fmtNum(v);
}

/**
 * The comparison as lines: a header naming both runs, then one row per figure; a legend under it
 * when a percentile is marked `*` (too few samples).
 */
export function renderComparison(
  a: LoadtestResult,
  b: LoadtestResult,
  rows: readonly CompareRow[],
): string[] {
  const label = (r: LoadtestResult): string => `${r.scenario}/${r.variant}`;
  const table = [['metric', `a: ${label(a)}`, `b: ${label(b)}`, 'b/a']];
  for (const r of rows)
    table.push([
      r.unit === 'ms' ? `${r.metric} (ms)` : r.metric,
      fmt(r.a, r.unit) + (r.thin.a ? '*' : ''),
      fmt(r.b, r.unit) + (r.thin.b ? '*' : ''),
      r.ratio === null ? '-' : r.ratio.toFixed(2),
    ]);
  const thin = rows.some((r) => r.thin.a || r.thin.b);
  return thin ? [...textTable(table), THIN_TAIL_LEGEND] : textTable(table);
}

/** Reads and checks a result file; rejects with `SLUICE_LOADTEST_RESULT_INVALID`. */
export async function readResult(file: string): Promise<LoadtestResult> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(file, 'utf8'));
  } catch (err) {
    throw new LoadtestError(
      LoadtestErrorCode.resultInvalid,
      `cannot read result ${file}: ${(err as Error).message}`,
    );
  }
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    (parsed as { format?: unknown }).format !== RESULT_FORMAT
  ) {
    throw new LoadtestError(
      LoadtestErrorCode.resultInvalid,
      `${file} is not a loadtest result (expected "format": "${RESULT_FORMAT}")`,
    );
  }
  const missing = missingField(parsed);
  if (missing !== null) {
    throw new LoadtestError(
      LoadtestErrorCode.resultInvalid,
      `${file} is not a complete loadtest result: "${missing}" is missing or of the wrong type`,
    );
  }
  return parsed as LoadtestResult;
}

/** The first field a comparison reads that `r` lacks (or holds with another type), or null. */
function missingField(r: object): string | null {
  const at = (path: string): unknown => {
    let v: unknown = r;
    for (const k of path.split('.'))
      v = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[k] : undefined;
    return v;
  };
  const objects = [
    'requests',
    'latency_ms',
    'latency_ms.e2e',
    'latency_ms.ttft',
    'latency_ms.itl',
    'target',
    'prefix_cache',
  ];
  for (const path of objects) {
    const v = at(path);
    if (typeof v !== 'object' || v === null) return path;
  }
  for (const path of ['requests.ok_per_s', 'requests.offered_per_s'])
    if (typeof at(path) !== 'number') return path;
  for (const path of ['tenants', 'nodes']) {
    const list = at(path);
    if (!Array.isArray(list) || list.some((x) => typeof x !== 'object' || x === null)) return path;
  }
  if (typeof at('variant') !== 'string') return 'variant';
  return null;
}
