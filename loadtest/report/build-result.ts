/**
 * Turns a phase's recorder, the nodes' counter samples and the run's facts into a `LoadtestResult`:
 * percentiles from the HdrHistograms, shares, per-node utilisation (busy slot time over slots ×
 * elapsed time) and the prefix-cache hit rate. Pure arithmetic; no I/O.
 */

import { encodeIntoCompressedBase64, type Histogram } from 'hdr-histogram-js';
import { percentileMs } from '../drive/latency-histogram.js';
import type { GroupStats, Recorder } from '../drive/recorder.js';
import type { NodeSample } from '../env/node-probe.js';
import type { RunSpec } from '../scenario/scenario-types.js';
import type { SourceStats } from '../workload/request-source.js';
import {
  RESULT_FORMAT,
  type GroupResult,
  type LatencySummary,
  type LoadtestResult,
  type NodeResult,
} from './result.js';

/** Facts about a run that the recorder does not hold. */
export interface RunFacts {
  spec: RunSpec;
  driver: LoadtestResult['load']['driver'];
  /** Offered arrivals per second (open loop), else null. */
  offeredRate: number | null;
  startedAt: Date;
  /** Sending phase, ms. */
  sendingMs: number;
  /** Sending phase plus drain, ms. */
  wallMs: number;
  targetKind: LoadtestResult['target']['kind'];
  targetUrls: string[];
  /** CPU seconds of the Sluice child over the phase, or null. */
  sluiceCpuS: number | null;
  /** Node samples at the phase start and after the drain (same nodes, same order). */
  nodesBefore: NodeSample[];
  nodesAfter: NodeSample[];
  source: SourceStats;
  stoppedEarly: string | null;
  /** The Sluice child's plugin counters over the phase, when it had any. */
  pluginMetrics?: Record<string, number>;
}

/** p50/p90/p99/p99.9/max and mean of `h` in ms (HdrHistogram values: the highest value equivalent to the percentile's bucket). */
export function summarize(h: Histogram): LatencySummary {
  const empty = h.totalCount === 0;
  return {
    count: h.totalCount,
    mean_ms: empty ? null : h.mean / 1000,
    p50_ms: percentileMs(h, 50),
    p90_ms: percentileMs(h, 90),
    p99_ms: percentileMs(h, 99),
    p999_ms: percentileMs(h, 99.9),
    max_ms: empty ? null : h.maxValue / 1000,
  };
}

/** `part / whole`, or 0 when whole is 0. */
export function share(part: number, whole: number): number {
  return whole === 0 ? 0 : part / whole;
}

function group(name: string, g: GroupStats, total: number): GroupResult {
  return {
    name,
    requests: g.requests,
    share: share(g.requests, total),
    ok: g.ok,
    errors: g.errors,
    e2e_p50_ms: percentileMs(g.e2e, 50),
    e2e_p99_ms: percentileMs(g.e2e, 99),
    ttft_p50_ms: percentileMs(g.ttft, 50),
    ttft_p99_ms: percentileMs(g.ttft, 99),
  };
}

/** Per-node differences between two samples of the same nodes. */
export function nodeResults(before: readonly NodeSample[], after: readonly NodeSample[]): NodeResult[] {
  const rows = after.map((a, index) => {
    const b = before.find((s) => s.url === a.url);
    const elapsedMs = b === undefined ? 0 : a.at - b.at;
    const busy = a.busySlotMs - (b?.busySlotMs ?? 0);
    const busySlots = elapsedMs > 0 ? busy / elapsedMs : 0;
    const query = a.cacheQueryTokens - (b?.cacheQueryTokens ?? 0);
    const hit = a.cacheHitTokens - (b?.cacheHitTokens ?? 0);
    return {
      index,
      url: a.url,
      speed_factor: a.speedFactor,
      served: a.served - (b?.served ?? 0),
      share: 0,
      busy_slots_avg: busySlots,
      utilisation: a.maxRunning === null ? null : busySlots / a.maxRunning,
      cache_query_tokens: query,
      cache_hit_tokens: hit,
      cache_hit_rate: query === 0 ? null : hit / query,
      generation_tokens: a.generationTokens - (b?.generationTokens ?? 0),
    };
  });
  const served = rows.reduce((sum, r) => sum + r.served, 0);
  for (const r of rows) r.share = share(r.served, served);
  return rows;
}

/** Assembles the result of one run. */
export function buildResult(rec: Recorder, facts: RunFacts): LoadtestResult {
  const { spec } = facts;
  const seconds = facts.sendingMs / 1000;
  const nodes = nodeResults(facts.nodesBefore, facts.nodesAfter);
  const query = nodes.reduce((s, n) => s + n.cache_query_tokens, 0);
  const hit = nodes.reduce((s, n) => s + n.cache_hit_tokens, 0);
  const sluiceCpuMs = facts.sluiceCpuS === null ? null : facts.sluiceCpuS * 1000;
  return {
    format: RESULT_FORMAT,
    scenario: spec.scenario,
    variant: spec.variant,
    description: spec.variantDescription === '' ? spec.description : spec.variantDescription,
    file: spec.file,
    started_at: facts.startedAt.toISOString(),
    seed: spec.seed,
    load: {
      mode: spec.load.mode,
      driver: facts.driver,
      rate_per_s: facts.offeredRate,
      arrivals: spec.load.arrivals,
      connections: spec.load.mode === 'closed' ? spec.load.connections : null,
      max_in_flight: spec.load.mode === 'open' ? spec.load.maxInFlight : null,
    },
    target: {
      kind: facts.targetKind,
      urls: facts.targetUrls,
      sluice_cpu_ms: sluiceCpuMs,
      sluice_cpu_us_per_request:
        sluiceCpuMs === null || rec.completed === 0 ? null : (sluiceCpuMs * 1000) / rec.completed,
    },
    fleet:
      spec.fleet === null
        ? null
        : {
            nodes: spec.fleet.nodes,
            profile: spec.fleet.profile.name,
            speed_factors: spec.fleet.speedFactors,
            process: spec.fleet.process,
          },
    duration_s: seconds,
    wall_s: facts.wallMs / 1000,
    requests: {
      total: rec.requests,
      ok: rec.ok,
      errors: rec.failed,
      offered_per_s: share(rec.requests, seconds),
      ok_per_s: share(rec.okWhileSending, seconds),
      stream_tokens_per_s: share(rec.streamTokens, seconds),
    },
    latency_ms: {
      e2e: summarize(rec.e2e),
      ttft: summarize(rec.ttft),
      itl: summarize(rec.itl),
      send_lag: summarize(rec.sendLag),
      error_e2e: summarize(rec.errorE2e),
    },
    statuses: Object.fromEntries(
      [...rec.statuses.entries()].sort((a, b) => a[0] - b[0]).map(([k, v]) => [String(k), v]),
    ),
    errors: Object.fromEntries([...rec.errors.entries()].sort((a, b) => b[1] - a[1])),
    tenants: rec.tenants.map((g, i) => group(spec.workload.tenants[i]?.name ?? String(i), g, rec.requests)),
    kinds: [...rec.kinds.entries()]
      .sort((a, b) => (a[0] < b[0] ? -1 : 1))
      .map(([kind, g]) => group(kind, g, rec.requests)),
    nodes,
    prefix_cache: { query_tokens: query, hit_tokens: hit, hit_rate: query === 0 ? null : hit / query },
    sessions: { started: facts.source.sessionsStarted, overflows: facts.source.sessionOverflows },
    generator: { peak_in_flight: rec.peakInFlight },
    timeline: rec.timeline.map((b, t_s) => ({
      t_s,
      requests: b.requests,
      ok: b.ok,
      errors: b.errors,
      e2e_p50_ms: percentileMs(b.e2e, 50),
      e2e_p99_ms: percentileMs(b.e2e, 99),
    })),
    histograms: { e2e: encodeIntoCompressedBase64(rec.e2e), ttft: encodeIntoCompressedBase64(rec.ttft) },
    stopped_early: facts.stoppedEarly,
    ...(facts.pluginMetrics === undefined ? {} : { plugin_metrics: facts.pluginMetrics }),
  };
}
