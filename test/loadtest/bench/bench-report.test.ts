/** The benchmark report: medians, ratios taken within a round, rate ranges, and every table. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  formatRate,
  median,
  parseResults,
  progressLine,
  renderReport,
  type ResultLine,
} from '../../../loadtest/bench/bench-report.js';
import type { BenchRecord } from '../../../loadtest/bench/cpu-accounting.js';

function rec(target: string, run: number, fields: Partial<BenchRecord>): BenchRecord {
  return {
    run,
    target,
    label: `label of ${target}`,
    case: 'fast',
    proxy: target.startsWith('direct') ? 'direct' : 'x',
    conns: 50,
    durS: 10,
    requests: 1000,
    rps: 10_000,
    p50Ms: 1,
    p90Ms: 2,
    p99Ms: 3,
    p999Ms: 4,
    maxMs: 5,
    errors: 0,
    corePct: [50, 90],
    stealPct: 0,
    proxyCpuPct: 50,
    upstreamCpuPct: 20,
    proxyUsPerReq: null,
    upstreamUsPerReq: 20,
    chunksPerReq: 0,
    proxyUsPerChunk: null,
    ...fields,
  };
}

/** The row of `table` (a markdown block) whose first cell mentions `target`, as cells. */
function row(report: string, target: string): string[] {
  const line = report.split('\n').find((l) => l.startsWith('| ') && l.includes(`(\`${target}\`)`));
  assert.ok(line !== undefined, `no row for ${target} in:\n${report}`);
  return line
    .split('|')
    .slice(1, -1)
    .map((c) => c.trim());
}

describe('benchmark report', () => {
  it('takes the median of odd and even lists', () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.ok(Number.isNaN(median([])));
  });

  it('writes rates from 1000 up in thousands', () => {
    assert.equal(formatRate(950.4), '950');
    assert.equal(formatRate(12_345), '12.3k');
    assert.equal(formatRate(NaN), '–');
  });

  it('gives each target its median CPU per request and ratios to the bare forwarder and nginx taken in the same round', () => {
    const lines: ResultLine[] = [];
    // Round 1: machine fast. Round 2: everything 2× slower. Round 3: fast again.
    for (const [run, k] of [
      [1, 1],
      [2, 2],
      [3, 1],
    ] as const) {
      lines.push(rec('direct', run, { rps: 20_000 / k }));
      lines.push(rec('nginx', run, { proxyUsPerReq: 30 * k, rps: 15_000 / k }));
      lines.push(rec('bare', run, { proxyUsPerReq: 50 * k, rps: 12_000 / k }));
      lines.push(rec('sluice-min', run, { proxyUsPerReq: (run === 2 ? 55 : 60) * k, rps: 10_000 / k }));
    }
    const report = renderReport(lines);
    // CPU medians: 60, 110, 60 → 60. Per-round ratios to bare: 1.2, 1.1, 1.2 → 1.20.
    assert.deepEqual(row(report, 'sluice-min'), [
      'label of sluice-min (`sluice-min`)',
      '60.0',
      '1.20',
      '2.00',
      '10.0k (5.0k–10.0k)',
      '0',
    ]);
    assert.deepEqual(row(report, 'bare').slice(1, 4), ['50.0', '1.00', '1.67']);
    assert.deepEqual(row(report, 'direct').slice(1, 5), ['–', '–', '–', '20.0k (10.0k–20.0k)']);
    assert.match(report, /node answers at once, 50 connections, 10 s per round/);
  });

  it('compares the slow case to direct by requests/s with median p50 and p99', () => {
    const report = renderReport([
      rec('direct-slow', 1, { case: 'slow', conns: 200, rps: 9500, p50Ms: 20.8, p99Ms: 22 }),
      rec('sluice-slow', 1, { case: 'slow', conns: 200, rps: 5700, p50Ms: 34.6, p99Ms: 40.1, errors: 2 }),
    ]);
    assert.deepEqual(row(report, 'sluice-slow').slice(1), ['5.7k', '0.60', '34.6', '40.1', '2']);
    assert.match(report, /200 connections/);
  });

  it('reports streams per chunk, at once and paced, each against its own bare forwarder and nginx', () => {
    const s = (target: string, c: string, perChunk: number): BenchRecord =>
      rec(target, 1, {
        case: c,
        chunksPerReq: 64,
        rps: 500,
        proxyUsPerChunk: perChunk,
        proxyUsPerReq: perChunk * 64,
      });
    const report = renderReport([
      s('nginx-stream', 'stream', 2),
      s('bare-stream', 'stream', 4),
      s('sluice-stream', 'stream', 5),
      s('nginx-paced', 'paced', 8),
      s('bare-paced', 'paced', 20),
      s('sluice-paced', 'paced', 30),
    ]);
    assert.deepEqual(row(report, 'sluice-stream').slice(1, 8), [
      'at once',
      '50',
      '5.00',
      '1.25',
      '2.50',
      '500',
      '32.0k',
    ]);
    assert.deepEqual(row(report, 'sluice-paced').slice(1, 6), ['paced', '50', '30.00', '1.50', '3.75']);
  });

  it('lists failed runs and prints a progress line for each kind of line', () => {
    const failed: ResultLine = {
      run: 1,
      target: 'haproxy',
      label: 'HAProxy',
      case: 'fast',
      failed: 'haproxy exited',
    };
    const report = renderReport([rec('bare', 1, { proxyUsPerReq: 50 }), failed]);
    assert.match(report, /#### Failed runs\n\n- round 1, `haproxy`: haproxy exited/);
    assert.match(progressLine(failed), /haproxy\s+FAILED: haproxy exited/);
    assert.match(progressLine(rec('bare', 1, { proxyUsPerReq: 50 })), /10\.0k req\/s .* proxy 50\.0 µs\/req/);
    assert.equal(renderReport([]), 'No results.\n');
  });

  it('reads a results file back line by line', () => {
    const a = rec('bare', 1, { proxyUsPerReq: 50 });
    assert.deepEqual(parseResults(`${JSON.stringify(a)}\n\n${JSON.stringify(a)}\n`), [a, a]);
  });
});
