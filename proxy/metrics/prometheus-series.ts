/**
 * The Prometheus families Sluice's histogram series and observability add to `/metrics`: one
 * histogram family per recorded quantity, by route × pool × node (`sluice_route_*`) and by tenant
 * (`sluice_tenant_*`), with buckets for LLM latencies so that instances aggregate; refusals by
 * reason; node drain/ejection state; event-loop delay, heap and process gauges; tracing and access
 * log counters. Runs on the admin listener only.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { AccessLog } from './access-log.js';
import type { EventLoopMonitor } from './event-loop-monitor.js';
import type { MetricSeries } from './metric-series.js';
import type { OtlpExporterStats } from './otlp-exporter.js';
import { REFUSALS } from './refusals.js';
import { METRICS, type MetricDef } from './series-metrics.js';
import type { SeriesRegistry } from './series-registry.js';

/** A node of the current plan with its pool. */
export interface PlanMember {
  pool: string;
  node: UpstreamNode;
  ejected: boolean;
}

/** What these families read. */
export interface SeriesMetricsSource {
  series: SeriesRegistry;
  refused: Float64Array;
  members: readonly PlanMember[];
  eventLoop: EventLoopMonitor | null;
  tracing: OtlpExporterStats | null;
  accessLog: AccessLog | null;
}

/** Escapes a label value (text format 0.0.4). */
export function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function num(v: number): string {
  return Number.isFinite(v) ? String(v) : v > 0 ? '+Inf' : v < 0 ? '-Inf' : 'NaN';
}

function histogramFamily(
  out: string[],
  name: string,
  help: string,
  def: MetricDef,
  rows: [string, MetricSeries][],
): void {
  const present = rows.filter(([, s]) => s.peek(def.id) !== null);
  if (present.length === 0) return;
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
  const k = def.scale.toBase;
  for (const [labels, s] of present) {
    const w = s.peek(def.id)!;
    let cum = 0;
    for (let i = 0; i < def.buckets.length; i++) {
      cum += w.buckets[i]!;
      out.push(`${name}_bucket{${labels},le="${num(def.buckets[i]!)}"} ${cum}`);
    }
    cum += w.buckets[def.buckets.length]!;
    out.push(`${name}_bucket{${labels},le="+Inf"} ${cum}`);
    out.push(`${name}_sum{${labels}} ${num(w.sum * k)}`, `${name}_count{${labels}} ${cum}`);
  }
}

function gauge(out: string[], name: string, help: string, rows: [string, number][]): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
  for (const [labels, v] of rows)
    out.push(labels === '' ? `${name} ${num(v)}` : `${name}{${labels}} ${num(v)}`);
}

function counter(out: string[], name: string, help: string, rows: [string, number][]): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
  for (const [labels, v] of rows)
    out.push(labels === '' ? `${name} ${num(v)}` : `${name}{${labels}} ${num(v)}`);
}

/** Appends the families to `out`. */
export function seriesFamilies(out: string[], src: SeriesMetricsSource): void {
  const routeRows: [string, MetricSeries][] = [...src.series.routes()].map((s) => [
    `route="${labelValue(s.labels.route)}",pool="${labelValue(s.labels.pool)}",node="${labelValue(s.labels.node)}"`,
    s,
  ]);
  const tenantRows: [string, MetricSeries][] = [...src.series.tenants()].map((s) => [
    `tenant="${labelValue(s.labels.tenant)}"`,
    s,
  ]);
  for (const def of METRICS) {
    histogramFamily(
      out,
      `sluice_route_${def.suffix}`,
      `${def.help} By route, pool and node.`,
      def,
      routeRows,
    );
    histogramFamily(out, `sluice_tenant_${def.suffix}`, `${def.help} By tenant.`, def, tenantRows);
  }
  counter(
    out,
    'sluice_refused_total',
    'Requests Sluice refused before any node answered, by reason and the status sent.',
    REFUSALS.map((r, i) => [`reason="${r.reason}",status="${r.status}"`, src.refused[i]!]),
  );
  if (tenantRows.length > 0) {
    const rows: [string, number][] = [];
    for (const [labels, s] of tenantRows)
      REFUSALS.forEach((r, i) => {
        if (s.refused[i]! > 0) rows.push([`${labels},reason="${r.reason}"`, s.refused[i]!]);
      });
    counter(
      out,
      'sluice_tenant_refused_total',
      'Refusals by tenant and reason (configured tenants only).',
      rows,
    );
  }
  const nodeLabels = (m: PlanMember): string =>
    `pool="${labelValue(m.pool)}",node="${labelValue(m.node.id)}"`;
  gauge(
    out,
    'sluice_node_drained',
    '1 while the node is drained by the admin API (no new requests).',
    src.members.map((m) => [nodeLabels(m), m.node.drained ? 1 : 0]),
  );
  gauge(
    out,
    'sluice_node_ejected',
    '1 while outlier detection has ejected the node.',
    src.members.map((m) => [nodeLabels(m), m.ejected ? 1 : 0]),
  );
  gauge(
    out,
    'sluice_node_saturated',
    "1 while the node's own metrics say it is saturated (queue or KV cache full).",
    src.members.map((m) => [nodeLabels(m), m.node.saturated ? 1 : 0]),
  );
  gauge(
    out,
    'sluice_node_in_flight',
    'Attempts in flight on the node.',
    src.members.map((m) => [nodeLabels(m), m.node.inFlight]),
  );
  if (src.eventLoop !== null) {
    const w = src.eventLoop.window();
    gauge(out, 'sluice_event_loop_delay_p99_seconds', 'p99 of the event-loop delay over the stats window.', [
      ['', w.p99],
    ]);
    gauge(out, 'sluice_event_loop_delay_max_seconds', 'Largest event-loop delay over the stats window.', [
      ['', w.max],
    ]);
  }
  const mem = process.memoryUsage();
  gauge(out, 'sluice_heap_used_bytes', 'V8 heap in use.', [['', mem.heapUsed]]);
  gauge(out, 'sluice_heap_total_bytes', 'V8 heap reserved.', [['', mem.heapTotal]]);
  gauge(out, 'process_resident_memory_bytes', 'Resident memory of the process.', [['', mem.rss]]);
  const cpu = process.cpuUsage();
  counter(out, 'process_cpu_seconds_total', 'User and system CPU time of the process.', [
    ['', (cpu.user + cpu.system) / 1e6],
  ]);
  gauge(out, 'process_start_time_seconds', 'Start time of the process, Unix seconds.', [
    ['', Math.round((Date.now() - process.uptime() * 1000) / 1000)],
  ]);
  if (src.tracing !== null) {
    counter(out, 'sluice_tracing_spans_exported_total', 'Spans the collector accepted.', [
      ['', src.tracing.exported],
    ]);
    counter(out, 'sluice_tracing_spans_dropped_total', 'Spans dropped: queue full or export failed.', [
      ['', src.tracing.dropped],
    ]);
    counter(out, 'sluice_tracing_export_failures_total', 'Export requests that failed or were refused.', [
      ['', src.tracing.failedRequests],
    ]);
  }
  if (src.accessLog !== null) {
    counter(out, 'sluice_access_log_lines_total', 'Access-log lines written.', [['', src.accessLog.written]]);
    counter(out, 'sluice_access_log_sampled_out_total', 'Access-log info lines skipped by sampling.', [
      ['', src.accessLog.sampledOut],
    ]);
  }
}
