/**
 * What the metrics layer costs on the request path: the per-chunk inter-token gap of a stream (a
 * clock read and one windowed-HDR record per series: the route × pool × node series, plus the
 * tenant's when tenants are configured), and one windowed-HDR record alone.
 */
import { nowMs } from '../../proxy/lifecycle/clock.js';
import { LATENCY_US } from '../../proxy/metrics/hdr.js';
import type { MetricSeries } from '../../proxy/metrics/metric-series.js';
import { RequestRecord, type ObservedRequest } from '../../proxy/metrics/request-record.js';
import type { RouteSeries } from '../../proxy/metrics/route-series.js';
import { StatsRegistry } from '../../proxy/metrics/stats.js';
import { WindowedHistogram } from '../../proxy/metrics/windowed-histogram.js';
import type { Pool } from '../../proxy/pool/pool.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import type { MicroBenchmark } from './micro-benchmark.js';

/** A request past its first token, recording into one node series (and a tenant's when asked). */
function streamingRecord(withTenant: boolean): RequestRecord {
  const stats = new StatsRegistry();
  const node = stats.series.route('chat', 'gpu', 'http://10.0.0.7:8000');
  const tenant = stats.series.tenant('team-a');
  const series = {
    forNode: (): MetricSeries => node,
    forPool: (): MetricSeries => node,
  } as unknown as RouteSeries;
  const req: ObservedRequest = {
    id: 'r1',
    method: 'POST',
    path: '/v1/chat/completions',
    startMs: nowMs(),
    status: 200,
    attempts: 1,
    tenant: withTenant ? 'team-a' : '',
    tenantInfo: withTenant ? { index: 0 } : null,
    route: { name: 'chat', series },
    pool: { name: 'gpu' } as unknown as Pool,
    plan: { tenantSeries: [tenant] },
    body: null,
    headers: [],
    header: () => undefined,
  };
  const rec = new RequestRecord(stats, req);
  rec.onHead(req, {} as UpstreamNode, 120);
  rec.onFirstToken(req, nowMs());
  return rec;
}

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'metrics: stream chunk, inter-token gap into the node series',
    allocationFree: true,
    setup() {
      const rec = streamingRecord(false);
      // In a typed array: a double kept in a closure variable would be boxed on every update.
      const t = Float64Array.of(nowMs());
      return () => {
        t[0]! += 0.02;
        rec.onChunk(t[0]!);
        return rec;
      };
    },
  },
  {
    name: 'metrics: stream chunk, inter-token gap into the node and tenant series',
    allocationFree: true,
    setup() {
      const rec = streamingRecord(true);
      // In a typed array: a double kept in a closure variable would be boxed on every update.
      const t = Float64Array.of(nowMs());
      return () => {
        t[0]! += 0.02;
        rec.onChunk(t[0]!);
        return rec;
      };
    },
  },
  {
    // The clock read is performance.now(), which returns a fresh heap number (16 bytes).
    name: 'metrics: stream chunk with its clock read, node series',
    setup() {
      const rec = streamingRecord(false);
      return () => {
        rec.onChunk(nowMs());
        return rec;
      };
    },
  },
  {
    name: 'metrics: windowed HDR record (one value)',
    allocationFree: true,
    setup() {
      const w = new WindowedHistogram(LATENCY_US, [0.001, 0.01, 0.1, 1, 10], { slices: 6, sliceMs: 10_000 });
      const values = Float64Array.from({ length: 4096 }, (_, i) => 200 * Math.pow(1.0023, i));
      let i = 0;
      return () => {
        w.record(values[i++ & 4095]!);
        return w;
      };
    },
  },
];
