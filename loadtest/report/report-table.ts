/**
 * The end-of-run report printed to stdout: throughput, latency percentiles (end to end, TTFT,
 * inter-token gaps), statuses and errors, per-tenant and per-kind shares and tails, per-node shares,
 * utilisation and cache hits, and the prefix-cache hit rate. Reads a `LoadtestResult` only.
 */

import type { GroupResult, LatencySummary, LoadtestResult } from './result.js';
import { fmtInt, fmtMs, fmtNum, fmtPct, textTable } from './text-table.js';
import { hasThinMark, markThin, THIN_TAIL_LEGEND } from './thin-tail.js';

/** One row of the latency table; a percentile with too few samples behind it is marked `*`. */
function latencyRow(name: string, s: LatencySummary): string[] {
  return [
    name,
    markThin(fmtMs(s.p50_ms), 50, s.count),
    markThin(fmtMs(s.p90_ms), 90, s.count),
    markThin(fmtMs(s.p99_ms), 99, s.count),
    markThin(fmtMs(s.p999_ms), 99.9, s.count),
    fmtMs(s.max_ms),
    fmtMs(s.mean_ms),
    fmtInt(s.count),
  ];
}

function groupTable(title: string, groups: readonly GroupResult[]): string[] {
  const rows = [[title, 'requests', 'share', 'ok', 'errors', 'e2e p50', 'e2e p99', 'TTFT p50', 'TTFT p99']];
  for (const g of groups) {
    rows.push([
      g.name,
      fmtInt(g.requests),
      fmtPct(g.share),
      fmtInt(g.ok),
      fmtInt(g.errors),
      fmtMs(g.e2e_p50_ms),
      fmtMs(g.e2e_p99_ms),
      fmtMs(g.ttft_p50_ms),
      fmtMs(g.ttft_p99_ms),
    ]);
  }
  return textTable(rows);
}

function counts(record: Record<string, number>): string {
  const parts = Object.entries(record).map(([k, v]) => `${k}: ${fmtInt(v)}`);
  return parts.length === 0 ? 'none' : parts.join('  ');
}

/** The plugin series over the phase, and the response cache's hit rate when one ran. */
function pluginLines(m: Record<string, number>): string[] {
  const out = ['plugins (over the measured phase):'];
  for (const [k, v] of Object.entries(m)) out.push(`  ${k} ${fmtNum(v)}`);
  let hits = 0;
  let misses = 0;
  for (const [k, v] of Object.entries(m)) {
    if (k.startsWith('sluice_plugin_response_cache_hits_total')) hits += v;
    if (k.startsWith('sluice_plugin_response_cache_misses_total')) misses += v;
  }
  if (hits + misses > 0) out.push(`  response cache hit rate: ${fmtPct(hits / (hits + misses))}`);
  return out;
}

function headline(r: LoadtestResult): string {
  const load =
    r.load.mode === 'open'
      ? `open loop, ${fmtNum(r.load.rate_per_s)} arrivals/s (${r.load.arrivals})`
      : `closed loop, ${r.load.connections ?? 0} connections (${r.load.driver})`;
  return `${r.scenario} / ${r.variant}: ${load}, ${r.duration_s.toFixed(1)} s, seed ${r.seed}`;
}

/** The report as lines (no trailing newline). */
export function renderReport(r: LoadtestResult): string[] {
  const out: string[] = [headline(r)];
  const fleet =
    r.fleet === null
      ? ''
      : ` -> ${r.fleet.nodes} nodes (${r.fleet.profile}, ${r.fleet.process}, speed ${r.fleet.speed_factors.join(',')})`;
  out.push(`target: ${r.target.kind} ${r.target.urls.join(' ')}${fleet}`);
  if (r.stopped_early !== null) out.push(`STOPPED EARLY: ${r.stopped_early}`);
  out.push('');
  const q = r.requests;
  out.push(
    `requests: ${fmtInt(q.total)} total, ${fmtInt(q.ok)} ok, ${fmtInt(q.errors)} errors; ` +
      `${fmtNum(q.ok_per_s)} ok/s (offered ${fmtNum(q.offered_per_s)} req/s)` +
      (q.stream_tokens_per_s > 0 ? `, ${fmtNum(q.stream_tokens_per_s)} streamed tokens/s` : ''),
  );
  out.push('');
  const l = r.latency_ms;
  const rows = [
    ['latency (ms)', 'p50', 'p90', 'p99', 'p99.9', 'max', 'mean', 'count'],
    latencyRow('end to end', l.e2e),
  ];
  if (l.ttft.count > 0) rows.push(latencyRow('TTFT', l.ttft));
  if (l.itl.count > 0) rows.push(latencyRow('inter-token', l.itl));
  if (l.error_e2e !== undefined && l.error_e2e.count > 0) rows.push(latencyRow('error answers', l.error_e2e));
  out.push(...textTable(rows));
  if (hasThinMark(rows)) out.push(THIN_TAIL_LEGEND);
  out.push('');
  out.push(`statuses: ${counts(r.statuses)}`, `errors:   ${counts(r.errors)}`, '');
  if (r.plugin_metrics !== undefined) out.push(...pluginLines(r.plugin_metrics), '');
  out.push(...groupTable('tenant', r.tenants), '');
  if (r.kinds.length > 1) out.push(...groupTable('kind', r.kinds), '');
  if (r.nodes.length > 0) {
    const nodeRows = [['node', 'url', 'speed', 'served', 'share', 'util', 'busy slots', 'cache hit']];
    for (const n of r.nodes) {
      nodeRows.push([
        String(n.index),
        n.url,
        fmtNum(n.speed_factor),
        fmtInt(n.served),
        fmtPct(n.share),
        fmtPct(n.utilisation),
        fmtNum(n.busy_slots_avg),
        fmtPct(n.cache_hit_rate),
      ]);
    }
    out.push(...textTable(nodeRows), '');
    const pc = r.prefix_cache;
    out.push(
      `prefix cache hit rate: ${fmtPct(pc.hit_rate)} (${fmtInt(pc.hit_tokens)} of ${fmtInt(pc.query_tokens)} prompt tokens looked up)`,
    );
  } else {
    out.push('nodes: not observed (no fleet, and no node_metrics that could be read)');
  }
  const lag = r.load.mode === 'open' ? `, send lag p99 ${fmtMs(l.send_lag.p99_ms)} ms` : '';
  const sessions =
    r.sessions.started > 0
      ? `sessions: ${fmtInt(r.sessions.started)} started, ${fmtInt(r.sessions.overflows)} overflows; `
      : '';
  out.push(`${sessions}generator: peak ${fmtInt(r.generator.peak_in_flight)} in flight${lag}`);
  if (r.target.sluice_cpu_ms !== null) {
    out.push(
      `sluice CPU: ${fmtNum(r.target.sluice_cpu_ms)} ms, ${fmtNum(r.target.sluice_cpu_us_per_request)} µs per request`,
    );
  }
  return out;
}
