/**
 * The report's arithmetic: percentiles of a known sample, shares, node utilisation and cache hit
 * rates from counter samples, and the ratios of `compare`.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createLatencyHistogram, recordMs } from '../../loadtest/drive/latency-histogram.js';
import { Recorder } from '../../loadtest/drive/recorder.js';
import type { NodeSample } from '../../loadtest/env/node-probe.js';
import { nodeResults, share, summarize } from '../../loadtest/report/build-result.js';
import { compareResults, ratioOf } from '../../loadtest/report/compare.js';
import type { LatencySummary, LoadtestResult } from '../../loadtest/report/result.js';
import type { PlannedRequest } from '../../loadtest/workload/planned-request.js';

/** Within HdrHistogram's 3-significant-digit precision (0.1%). */
function near(actual: number | null, expected: number): void {
  assert.ok(actual !== null, `expected ${expected}, got null`);
  assert.ok(Math.abs(actual - expected) <= expected * 0.001, `expected ${expected} ± 0.1%, got ${actual}`);
}

/** The summary of a series with nothing recorded. */
const EMPTY: LatencySummary = {
  count: 0,
  mean_ms: null,
  p50_ms: null,
  p90_ms: null,
  p99_ms: null,
  p999_ms: null,
  max_ms: null,
};

function plan(tenant: number): PlannedRequest {
  return {
    kind: 'chat',
    tenant,
    path: '/v1/chat/completions',
    headers: {},
    body: '{}',
    stream: false,
    session: null,
  };
}

describe('report maths', () => {
  it('gives the percentiles of 1..1000 ms within HDR precision and the exact max', () => {
    const h = createLatencyHistogram();
    for (let ms = 1; ms <= 1000; ms++) recordMs(h, ms);
    const s = summarize(h);
    assert.equal(s.count, 1000);
    near(s.p50_ms, 500);
    near(s.p90_ms, 900);
    near(s.p99_ms, 990);
    near(s.p999_ms, 999);
    assert.equal(s.max_ms, 1000);
    near(s.mean_ms, 500.5);
  });

  it('reports an empty series as nulls, not zeros', () => {
    assert.deepEqual(summarize(createLatencyHistogram()), EMPTY);
  });

  it('measures latency from the intended send time and counts failures by category', () => {
    const rec = new Recorder(2, 1000);
    const ok = {
      status: 200,
      error: null,
      sentAt: 1100,
      endAt: 1250,
      firstTokenAt: 1120,
      tokens: 3,
      gaps: [],
      reply: null,
    };
    rec.record(plan(0), 1000, ok);
    rec.record(plan(1), 1000, { ...ok, status: 503, error: 'http_503' });
    rec.recordUnsent(plan(1), 1000, 'client_overflow');
    assert.equal(summarize(rec.e2e).max_ms, 250);
    assert.equal(summarize(rec.ttft).max_ms, 120);
    assert.deepEqual([rec.requests, rec.ok, rec.failed], [3, 1, 2]);
    assert.deepEqual(
      [...rec.errors],
      [
        ['http_503', 1],
        ['client_overflow', 1],
      ],
    );
    assert.deepEqual(
      [...rec.statuses],
      [
        [200, 1],
        [503, 1],
      ],
    );
    assert.deepEqual(
      rec.tenants.map((t) => [t.requests, t.ok, t.errors]),
      [
        [1, 1, 0],
        [2, 0, 2],
      ],
    );
    assert.equal(share(rec.tenants[1]?.requests ?? 0, rec.requests), 2 / 3);
  });

  it('derives shares, utilisation and cache hit rates from node counter differences', () => {
    const sample = (
      url: string,
      at: number,
      served: number,
      busy: number,
      query: number,
      hit: number,
    ): NodeSample => ({
      url,
      served,
      busySlotMs: busy,
      cacheQueryTokens: query,
      cacheHitTokens: hit,
      generationTokens: 0,
      speedFactor: 1,
      maxRunning: 10,
      at,
    });
    const before = [sample('a', 0, 100, 1000, 0, 0), sample('b', 0, 50, 0, 0, 0)];
    const after = [sample('a', 2000, 130, 11_000, 400, 100), sample('b', 2000, 60, 2000, 0, 0)];
    const [a, b] = nodeResults(before, after);
    assert.deepEqual([a?.served, b?.served], [30, 10]);
    assert.deepEqual([a?.share, b?.share], [0.75, 0.25]);
    assert.deepEqual([a?.busy_slots_avg, a?.utilisation], [5, 0.5]);
    assert.deepEqual([b?.busy_slots_avg, b?.utilisation], [1, 0.1]);
    assert.deepEqual([a?.cache_hit_rate, b?.cache_hit_rate], [0.25, null]);
  });

  it('compares two results with b / a ratios and matches tenants by name', () => {
    const base = (okPerS: number, p99: number, tenantP99: number): LoadtestResult =>
      ({
        scenario: 's',
        variant: 'v',
        requests: {
          total: 100,
          ok: 90,
          errors: 10,
          offered_per_s: 50,
          ok_per_s: okPerS,
          stream_tokens_per_s: 0,
        },
        latency_ms: {
          e2e: { count: 90, mean_ms: 10, p50_ms: 10, p90_ms: 20, p99_ms: p99, p999_ms: 50, max_ms: 60 },
          ttft: EMPTY,
          itl: EMPTY,
          send_lag: EMPTY,
        },
        prefix_cache: { query_tokens: 0, hit_tokens: 0, hit_rate: null },
        nodes: [],
        target: { kind: 'direct', urls: [], sluice_cpu_ms: null, sluice_cpu_us_per_request: null },
        tenants: [
          {
            name: 'x',
            requests: 50,
            share: 0.5,
            ok: 45,
            errors: 5,
            e2e_p50_ms: 1,
            e2e_p99_ms: tenantP99,
            ttft_p50_ms: null,
            ttft_p99_ms: null,
          },
          {
            name: 'y',
            requests: 50,
            share: 0.5,
            ok: 45,
            errors: 5,
            e2e_p50_ms: 1,
            e2e_p99_ms: 4,
            ttft_p50_ms: null,
            ttft_p99_ms: null,
          },
        ],
      }) as unknown as LoadtestResult;
    const rows = compareResults(base(100, 40, 8), base(150, 10, 2));
    const byName = new Map(rows.map((r) => [r.metric, r]));
    assert.equal(byName.get('ok requests/s')?.ratio, 1.5);
    assert.equal(byName.get('e2e p99')?.ratio, 0.25);
    assert.equal(byName.get('error rate')?.ratio, 1);
    assert.equal(byName.get('tenant x e2e p99')?.ratio, 0.25);
    assert.equal(byName.get('tenant y e2e p99')?.ratio, 1);
    assert.equal(byName.has('TTFT p50'), false);
    assert.equal(byName.get('prefix cache hit rate')?.ratio, null);
    assert.equal(ratioOf(0, 5), null);
  });
});
