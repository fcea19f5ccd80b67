/**
 * Renders the Prometheus text exposition (format 0.0.4) from the live stats. Runs on the admin
 * listener only, never on the request path.
 */
import type { StatsRegistry } from './stats.js';
import type { RemoteGauges } from './stats-delta.js';
import type { LatencyRecorder } from './latency-recorder.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { retiredKey, type RetiredCounts } from '../upstream/node-registry.js';
import type { PoolState } from '../pool/pool-state.js';
import type { RateLimiterCounters } from '../ratelimit/rate-limiter.js';
import type { MicroBatcherStats } from '../batch/batch-stats.js';
import type { PoolCapacityReport } from '../capacity/pool-capacity.js';
import type { BatchApiStats } from '../batch-api/batch-api.js';
import type { ExecutorStats } from '../batch-api/job-executor.js';
import type { JobWorkerStats } from '../jobs/job-worker.js';
import type { PluginMetricsRegistry } from '../plugin/plugin-metrics.js';
import { seriesFamilies, type SeriesMetricsSource } from './prometheus-series.js';

const QUANTILES = [0.5, 0.9, 0.99, 0.999];

/** What the exporter reads besides the stats registry. */
export interface MetricsSource extends Partial<Omit<SeriesMetricsSource, 'series' | 'refused'>> {
  stats: StatsRegistry;
  nodes: Iterable<UpstreamNode>;
  /** Counts of closed node objects by `pool|url` (NodeRegistry.retired), kept in their series. */
  retiredNodes?: ReadonlyMap<string, RetiredCounts>;
  pools: Iterable<PoolState>;
  /** Micro-batchers of the current plan's routes, by route name. */
  batchers: [string, MicroBatcherStats][];
  /** The rate limiter's counters, null when no tenants are configured. */
  limiter: RateLimiterCounters | null;
  /** What the rate limiter holds now (gauges); absent or null when no tenants are configured. */
  limiterLoad?: { readonly concurrentRequests: number; readonly reservedTokens: number } | null;
  configVersion: number;
  draining: boolean;
  /** Overload protection's state; absent or null while it is off. */
  overload?: OverloadGauges | null;
  /** The TLS listeners; absent or empty when there are none. */
  tls?: readonly TlsListenerGauges[];
  /** Latest capacity reports per pool; absent or empty: no capacity gauges. */
  capacity?: readonly PoolCapacityReport[];
  /** The batch API's counters; absent when `batch_api` is off. */
  batchApi?: BatchApiMetrics;
  /** Plugin series (`sluice_plugin_*`); absent: none. */
  plugins?: PluginMetricsRegistry;
}

/** What a TLS listener exports. */
export interface TlsListenerGauges {
  readonly listener: string;
  /** End of validity of the certificate served to new connections. */
  readonly notAfter: Date;
  readonly swaps: number;
  /** Connections still on an older certificate. */
  readonly retiredConnections: number;
}

/** What overload protection exports. */
export interface OverloadGauges {
  readonly shedding: boolean;
  readonly shed: number;
  readonly episodes: number;
  /** Event-loop delay p99 of the last sample, ms. */
  readonly delayMs: number;
  /** Heap used of its limit at the last sample, percent. */
  readonly heapPercent: number;
}

/** What the batch API exports. */
export interface BatchApiMetrics {
  api: BatchApiStats;
  worker: JobWorkerStats;
  executor: ExecutorStats;
  /** Job items not finished yet (all batches), as last sampled; null before the first sample. */
  backlog: number | null;
}

function listenerSeries(out: string[], stats: StatsRegistry): void {
  const ls = [...stats.listeners.values()];
  out.push(
    '# HELP sluice_listener_connections Client connections open now.',
    '# TYPE sluice_listener_connections gauge',
  );
  for (const l of ls) {
    if (l.connectionsCounted)
      out.push(
        `sluice_listener_connections{listener="${label(l.listener)}"} ${stats.connectionsAll(l.listener)}`,
      );
  }
  out.push(
    '# HELP sluice_listener_connections_refused_total Connections closed at accept because max_connections were open.',
    '# TYPE sluice_listener_connections_refused_total counter',
  );
  for (const l of ls)
    out.push(`sluice_listener_connections_refused_total{listener="${label(l.listener)}"} ${l.refused}`);
  out.push(
    '# HELP sluice_listener_timeouts_total Connections or requests ended by a client deadline (header, body, write).',
    '# TYPE sluice_listener_timeouts_total counter',
  );
  for (const l of ls) {
    const name = label(l.listener);
    out.push(
      `sluice_listener_timeouts_total{listener="${name}",kind="header"} ${l.headerTimeouts}`,
      `sluice_listener_timeouts_total{listener="${name}",kind="body"} ${l.bodyTimeouts}`,
      `sluice_listener_timeouts_total{listener="${name}",kind="write"} ${l.writeTimeouts}`,
    );
  }
  out.push(
    '# HELP sluice_listener_buffered_bytes_max Most response bytes one connection held for a slow client (pipelining listeners).',
    '# TYPE sluice_listener_buffered_bytes_max gauge',
  );
  for (const l of ls)
    out.push(`sluice_listener_buffered_bytes_max{listener="${label(l.listener)}"} ${l.bufferedHighWater}`);
}

function batchApiSeries(out: string[], m: BatchApiMetrics): void {
  const counter = (name: string, help: string, value: number): void => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`, `${name} ${value}`);
  };
  counter(
    'sluice_batch_api_requests_total',
    'Requests to /v1/batch, /v1/files and /v1/batches.',
    m.api.requests,
  );
  counter('sluice_batch_api_sync_items_total', 'Items received by POST /v1/batch.', m.api.syncItems);
  counter(
    'sluice_batch_api_idempotent_replays_total',
    'Answers replayed for a repeated Idempotency-Key.',
    m.api.replayed,
  );
  counter(
    'sluice_batch_api_idempotency_conflicts_total',
    'Idempotency-Key conflicts answered with 409.',
    m.api.conflicts,
  );
  counter(
    'sluice_batch_api_store_errors_total',
    'Batch store failures answered with 503.',
    m.api.storeErrors,
  );
  counter(
    'sluice_batch_jobs_items_started_total',
    'Job item executions started (this process).',
    m.worker.started,
  );
  counter(
    'sluice_batch_jobs_items_recorded_total',
    'Job item results recorded (this process).',
    m.worker.recorded,
  );
  counter(
    'sluice_batch_jobs_items_retried_total',
    'Job item attempts given back for a retry.',
    m.worker.retried,
  );
  counter(
    'sluice_batch_jobs_duplicate_results_total',
    'Results dropped because the item already had one.',
    m.worker.duplicates,
  );
  counter(
    'sluice_batch_jobs_store_errors_total',
    'Failed job store calls of the worker (claims, sweeps, results), tried again or recovered by lease expiry.',
    m.worker.storeErrors,
  );
  counter(
    'sluice_batch_jobs_items_deferred_total',
    'Times Sluice itself refused a job item and it waited.',
    m.executor.deferred,
  );
  if (m.backlog !== null) {
    out.push(
      '# HELP sluice_batch_jobs_backlog_items Job items not finished yet, across every batch in the store.',
      '# TYPE sluice_batch_jobs_backlog_items gauge',
      `sluice_batch_jobs_backlog_items ${m.backlog}`,
    );
  }
}

function label(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function summary(out: string[], name: string, help: string, series: [string, LatencyRecorder][]): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} summary`);
  for (const [labels, rec] of series) {
    if (rec.count > 0)
      for (const q of QUANTILES)
        out.push(`${name}{${labels},quantile="${q}"} ${rec.percentileSeconds(q * 100)}`);
    out.push(`${name}_sum{${labels}} ${rec.sumSeconds}`, `${name}_count{${labels}} ${rec.count}`);
  }
}

/** The full exposition text. */
export function renderPrometheus(src: MetricsSource): string {
  const { stats } = src;
  const out: string[] = [];
  out.push(
    '# HELP sluice_requests_total Requests answered, by route and HTTP status.',
    '# TYPE sluice_requests_total counter',
  );
  for (const r of stats.routes.values()) {
    for (const [code, n] of r.byStatus)
      out.push(`sluice_requests_total{route="${label(r.route)}",code="${code}"} ${n}`);
  }
  out.push(
    '# HELP sluice_requests_aborted_total Requests the client abandoned before the response ended.',
    '# TYPE sluice_requests_aborted_total counter',
  );
  for (const r of stats.routes.values())
    out.push(`sluice_requests_aborted_total{route="${label(r.route)}"} ${r.aborted}`);
  // Clients that left while sending the body, before routing (an empty label: no route).
  out.push(`sluice_requests_aborted_total{route=""} ${stats.abortedUnrouted}`);
  out.push(
    '# HELP sluice_downstream_rejected_total Requests refused before reaching a node, by error code.',
    '# TYPE sluice_downstream_rejected_total counter',
  );
  for (const [code, n] of stats.rejected) out.push(`sluice_downstream_rejected_total{code="${code}"} ${n}`);
  listenerSeries(out, stats);
  out.push(
    '# HELP sluice_requests_in_flight Requests being served now.',
    '# TYPE sluice_requests_in_flight gauge',
    `sluice_requests_in_flight ${stats.inFlightAll}`,
    ...threadRows(stats),
  );
  const routes = [...stats.routes.values()];
  summary(
    out,
    'sluice_request_duration_seconds',
    'Time from request arrival to the last response byte.',
    routes.map((r) => [`route="${label(r.route)}"`, r.duration]),
  );
  summary(
    out,
    'sluice_upstream_ttfb_seconds',
    'Time from dispatch to the upstream response head.',
    routes.map((r) => [`route="${label(r.route)}"`, r.ttfb]),
  );
  summary(
    out,
    'sluice_time_to_first_token_seconds',
    'Time from request arrival to the first event of a streamed answer, as forwarded to the client.',
    routes.map((r) => [`route="${label(r.route)}"`, r.ttft]),
  );
  out.push(
    '# HELP sluice_upstream_attempts_total Attempts sent to each node.',
    '# TYPE sluice_upstream_attempts_total counter',
  );
  const nodes = nodeSeries(src.nodes, src.retiredNodes);
  for (const n of nodes) out.push(`sluice_upstream_attempts_total{${n.labels}} ${n.attempts}`);
  out.push(
    '# HELP sluice_upstream_failures_total Attempts that failed at the transport level.',
    '# TYPE sluice_upstream_failures_total counter',
  );
  for (const n of nodes) out.push(`sluice_upstream_failures_total{${n.labels}} ${n.failures}`);
  out.push(
    '# HELP sluice_upstream_in_flight Attempts in flight per node.',
    '# TYPE sluice_upstream_in_flight gauge',
  );
  for (const n of nodes) out.push(`sluice_upstream_in_flight{${n.labels}} ${n.inFlight}`);
  out.push(
    '# HELP sluice_upstream_prefill_queue_tokens Prompt tokens of attempts on the node still waiting for their first token (pools whose policy scores it).',
    '# TYPE sluice_upstream_prefill_queue_tokens gauge',
  );
  for (const n of nodes) out.push(`sluice_upstream_prefill_queue_tokens{${n.labels}} ${n.pendingTokens}`);
  const pools = [...src.pools];
  const poolCounter = (name: string, help: string, value: (p: PoolState) => number): void => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
    for (const p of pools) out.push(`${name}{pool="${label(p.name)}"} ${value(p)}`);
  };
  poolCounter('sluice_pool_retries_total', 'Retries dispatched to another node.', (p) => p.retries);
  poolCounter(
    'sluice_pool_retry_budget_refused_total',
    'Retries not made because the retry budget was spent.',
    (p) => p.retryBudget.refused,
  );
  poolCounter('sluice_pool_hedges_total', 'Hedged attempts dispatched.', (p) => p.hedges);
  poolCounter('sluice_pool_hedge_wins_total', 'Hedged attempts that answered first.', (p) => p.hedgeWins);
  poolCounter(
    'sluice_pool_no_node_total',
    'Requests that found no eligible node in the pool.',
    (p) => p.noNode,
  );
  poolCounter('sluice_pool_fallback_total', 'Requests this pool served as a fallback.', (p) => p.fellBack);
  out.push(
    '# HELP sluice_health_events_total Node health state changes by pool and kind.',
    '# TYPE sluice_health_events_total counter',
  );
  for (const p of pools)
    for (const [kind, n] of p.healthEvents)
      out.push(`sluice_health_events_total{pool="${label(p.name)}",kind="${kind}"} ${n}`);
  out.push(
    '# HELP sluice_upstream_available 1 when the node takes traffic (not ejected, checks passing).',
    '# TYPE sluice_upstream_available gauge',
  );
  for (const n of nodes) out.push(`sluice_upstream_available{${n.labels}} ${n.available ? 1 : 0}`);
  out.push(
    '# HELP sluice_upstream_ttfb_ewma_seconds Decaying average time to first byte per node.',
    '# TYPE sluice_upstream_ttfb_ewma_seconds gauge',
  );
  for (const n of nodes)
    if (n.ttfbEwmaMs >= 0) out.push(`sluice_upstream_ttfb_ewma_seconds{${n.labels}} ${n.ttfbEwmaMs / 1000}`);
  const admission = pools.filter((p) => p.admission !== null);
  if (admission.length > 0) {
    out.push(
      '# HELP sluice_admission_total Admission decisions by pool and outcome.',
      '# TYPE sluice_admission_total counter',
    );
    for (const p of admission) {
      const c = p.admission!.counters;
      const pool = label(p.name);
      const rows: [string, number][] = [
        ['admitted', c.admittedImmediately],
        ['admitted_from_queue', c.admittedFromQueue],
        ['queued', c.queued],
        ['cancelled', c.cancelled],
        ['rejected_queue_full', c.rejectedQueueFull],
        ['rejected_evicted', c.rejectedEvicted],
        ['rejected_queue_timeout', c.rejectedQueueTimeout],
        ['rejected_deadline', c.rejectedDeadline],
      ];
      for (const [outcome, n] of rows)
        out.push(`sluice_admission_total{pool="${pool}",outcome="${outcome}"} ${n}`);
    }
    out.push(
      '# HELP sluice_admission_queued Requests waiting in the admission queue.',
      '# TYPE sluice_admission_queued gauge',
    );
    for (const p of admission)
      out.push(`sluice_admission_queued{pool="${label(p.name)}"} ${p.admission!.queuedAll}`);
    out.push(
      '# HELP sluice_admission_limit Current in-flight limit of the pool.',
      '# TYPE sluice_admission_limit gauge',
    );
    for (const p of admission)
      out.push(`sluice_admission_limit{pool="${label(p.name)}"} ${p.admission!.limit}`);
    out.push(
      '# HELP sluice_admission_in_flight Requests holding an admission slot of the pool.',
      '# TYPE sluice_admission_in_flight gauge',
    );
    for (const p of admission)
      out.push(`sluice_admission_in_flight{pool="${label(p.name)}"} ${p.admission!.inFlightAll}`);
  }
  const lc = src.limiter;
  if (lc !== null) {
    out.push(
      '# HELP sluice_ratelimit_total Rate-limit decisions by outcome.',
      '# TYPE sluice_ratelimit_total counter',
    );
    const rows: [string, number][] = [
      ['admitted', lc.admitted],
      ['admitted_degraded', lc.admittedDegraded],
      ['rejected_requests', lc.rejectedRequests],
      ['rejected_tokens', lc.rejectedTokens],
      ['rejected_concurrency', lc.rejectedConcurrency],
      ['rejected_unavailable', lc.rejectedUnavailable],
    ];
    for (const [outcome, n] of rows) out.push(`sluice_ratelimit_total{outcome="${outcome}"} ${n}`);
  }
  const load = src.limiterLoad ?? null;
  if (load !== null) {
    out.push(
      '# HELP sluice_ratelimit_concurrent_requests Requests holding a tenant concurrency slot.',
      '# TYPE sluice_ratelimit_concurrent_requests gauge',
      `sluice_ratelimit_concurrent_requests ${load.concurrentRequests + remoteSum(src.stats, (g) => g.limiterConcurrent)}`,
      '# HELP sluice_ratelimit_reserved_tokens Tokens pre-debited for requests that have not ended.',
      '# TYPE sluice_ratelimit_reserved_tokens gauge',
      `sluice_ratelimit_reserved_tokens ${load.reservedTokens + remoteSum(src.stats, (g) => g.limiterReserved)}`,
    );
  }
  if (src.batchers.length > 0) {
    const rows: [string, string, (b: MicroBatcherStats) => number][] = [
      ['sluice_batch_items_total', 'Items submitted to the micro-batcher.', (b) => b.items],
      ['sluice_batch_batches_total', 'Micro-batches dispatched.', (b) => b.batches],
      ['sluice_batch_upstream_calls_total', 'Upstream calls made for micro-batches.', (b) => b.upstreamCalls],
      [
        'sluice_batch_idle_pass_through_total',
        'Items sent at once because the pool was idle.',
        (b) => b.idlePassThrough,
      ],
      [
        'sluice_batch_deduplicated_total',
        'Items answered from an identical item in the same window.',
        (b) => b.deduplicated,
      ],
      ['sluice_batch_retries_total', 'Item retries.', (b) => b.retries],
      ['sluice_batch_failed_items_total', 'Items that ended with an error.', (b) => b.failedItems],
    ];
    for (const [name, help, value] of rows) {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const [route, b] of src.batchers) out.push(`${name}{route="${label(route)}"} ${value(b)}`);
    }
  }
  const capacity = src.capacity ?? [];
  if (capacity.length > 0) {
    const gauge = (name: string, help: string, value: (r: PoolCapacityReport) => number | null): void => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
      for (const r of capacity) {
        const v = value(r);
        if (v !== null) out.push(`${name}{pool="${label(r.pool)}"} ${v}`);
      }
    };
    gauge(
      'sluice_pool_recommended_nodes',
      'Nodes the observed load needs at the target utilisation: ceil(items/s × time per item ÷ batch size ÷ target).',
      (r) => r.recommendedNodes,
    );
    gauge('sluice_pool_nodes', 'Nodes configured in the pool.', (r) => r.nodes);
    gauge(
      'sluice_pool_observed_items_per_second',
      'Items the nodes were given per second over the capacity window.',
      (r) => r.itemsPerSecond,
    );
    gauge(
      'sluice_pool_observed_upstream_time_seconds',
      'Mean upstream time of one call over the capacity window.',
      (r) => (r.timePerItemMs === null ? null : r.timePerItemMs / 1000),
    );
    gauge(
      'sluice_pool_observed_batch_size_items',
      'Items one node works on at once (items per call × calls per node).',
      (r) => r.batchSize,
    );
    gauge(
      'sluice_pool_utilisation_ratio',
      'Busy node-equivalents ÷ configured nodes over the capacity window.',
      (r) => r.utilisationNow,
    );
    gauge(
      'sluice_pool_target_utilisation_ratio',
      'Target utilisation the recommendation plans for.',
      (r) => r.targetUtilisation,
    );
  }
  const mirrors = [...stats.mirrors.values()];
  if (mirrors.length > 0) {
    out.push(
      "# HELP sluice_mirror_requests_total Shadow requests by route and the shadow pool's status.",
      '# TYPE sluice_mirror_requests_total counter',
    );
    for (const m of mirrors)
      for (const [code, n] of m.byStatus)
        out.push(`sluice_mirror_requests_total{route="${label(m.route)}",code="${code}"} ${n}`);
    summary(
      out,
      'sluice_mirror_duration_seconds',
      'Duration of shadow requests.',
      mirrors.map((m) => [`route="${label(m.route)}"`, m.duration]),
    );
  }
  if (src.batchApi !== undefined) batchApiSeries(out, src.batchApi);
  out.push(
    '# HELP sluice_config_reloads_total Config reloads by result.',
    '# TYPE sluice_config_reloads_total counter',
  );
  for (const result of ['applied', 'rejected'])
    out.push(`sluice_config_reloads_total{result="${result}"} ${stats.reloads.get(result) ?? 0}`);
  out.push(
    '# HELP sluice_config_version Version of the active config (1 at start).',
    '# TYPE sluice_config_version gauge',
    `sluice_config_version ${src.configVersion}`,
  );
  const tls = src.tls ?? [];
  if (tls.length > 0) {
    out.push(
      '# HELP sluice_tls_certificate_expiry_timestamp_seconds End of validity of the certificate new connections get (Unix time).',
      '# TYPE sluice_tls_certificate_expiry_timestamp_seconds gauge',
      ...tls.map(
        (t) =>
          `sluice_tls_certificate_expiry_timestamp_seconds{listener="${label(t.listener)}"} ${Math.floor(t.notAfter.getTime() / 1000)}`,
      ),
      '# HELP sluice_tls_certificate_swaps_total Certificates swapped in by reloads.',
      '# TYPE sluice_tls_certificate_swaps_total counter',
      ...tls.map((t) => `sluice_tls_certificate_swaps_total{listener="${label(t.listener)}"} ${t.swaps}`),
      '# HELP sluice_tls_retired_connections Connections still served with an older certificate.',
      '# TYPE sluice_tls_retired_connections gauge',
      ...tls.map(
        (t) => `sluice_tls_retired_connections{listener="${label(t.listener)}"} ${t.retiredConnections}`,
      ),
    );
  }
  const o = src.overload ?? null;
  if (o !== null) {
    out.push(
      '# HELP sluice_overload_shedding 1 while Sluice sheds new requests because it is itself overloaded.',
      '# TYPE sluice_overload_shedding gauge',
      `sluice_overload_shedding ${o.shedding ? 1 : 0}`,
      '# HELP sluice_overload_shed_total Requests refused with 503 while Sluice was overloaded.',
      '# TYPE sluice_overload_shed_total counter',
      `sluice_overload_shed_total ${o.shed}`,
      '# HELP sluice_overload_episodes_total Times overload shedding started.',
      '# TYPE sluice_overload_episodes_total counter',
      `sluice_overload_episodes_total ${o.episodes}`,
      '# HELP sluice_overload_event_loop_delay_seconds Event-loop delay p99 over the last overload sample.',
      '# TYPE sluice_overload_event_loop_delay_seconds gauge',
      `sluice_overload_event_loop_delay_seconds ${o.delayMs / 1000}`,
      '# HELP sluice_overload_heap_used_ratio V8 heap used over its limit at the last overload sample.',
      '# TYPE sluice_overload_heap_used_ratio gauge',
      `sluice_overload_heap_used_ratio ${o.heapPercent / 100}`,
    );
  }
  out.push(
    '# HELP sluice_draining 1 while the server drains for shutdown.',
    '# TYPE sluice_draining gauge',
    `sluice_draining ${src.draining ? 1 : 0}`,
  );
  src.plugins?.render(out);
  seriesFamilies(out, {
    series: stats.series,
    refused: stats.refused,
    members: src.members ?? [],
    eventLoop: src.eventLoop ?? null,
    tracing: src.tracing ?? null,
    accessLog: src.accessLog ?? null,
  });
  return out.join('\n') + '\n';
}

/** One `sluice_upstream_*` series: a pool's node, its live objects summed. */
interface NodeSeries {
  labels: string;
  attempts: number;
  failures: number;
  inFlight: number;
  pendingTokens: number;
  available: boolean;
  ttfbEwmaMs: number;
}

/**
 * The nodes by pool and URL, one series each. The same URL in two pools is two nodes (each pool has
 * its own limits and health), so the pool is a label; and a reload that changes a pool's connection
 * settings keeps the old node until its requests end, so two live objects may share both labels:
 * their counts are summed, and the newer one (the registry's later) gives availability and the TTFB
 * average. The counts of objects already closed (`retired`) stay in their series, so its counters
 * never go down.
 */
function nodeSeries(
  nodes: Iterable<UpstreamNode>,
  retired: ReadonlyMap<string, RetiredCounts> | undefined,
): NodeSeries[] {
  const byLabels = new Map<string, NodeSeries>();
  for (const n of nodes) {
    const labels = `pool="${label(n.poolName)}",node="${label(n.id)}"`;
    const s = byLabels.get(labels);
    if (s === undefined) {
      const gone = retired?.get(retiredKey(n.poolName, n.id));
      byLabels.set(labels, {
        labels,
        attempts: n.attempts + (gone?.attempts ?? 0),
        failures: n.failures + (gone?.failures ?? 0),
        inFlight: n.inFlight,
        pendingTokens: n.timing.pendingTokens,
        available: n.available,
        ttfbEwmaMs: n.ttfbEwmaMs,
      });
      continue;
    }
    s.attempts += n.attempts;
    s.failures += n.failures;
    s.inFlight += n.inFlight;
    s.pendingTokens += n.timing.pendingTokens;
    s.available = n.available;
    s.ttfbEwmaMs = n.ttfbEwmaMs;
  }
  return [...byLabels.values()];
}

/** The sum of one gauge over the worker threads' last reports. */
function remoteSum(stats: StatsRegistry, gauge: (g: RemoteGauges) => number): number {
  let n = 0;
  for (const g of stats.remote.values()) n += gauge(g);
  return n;
}

/** Requests served per thread, when there are worker threads (`server.workers`); thread 0 is the main one. */
function threadRows(stats: StatsRegistry): string[] {
  if (stats.servedByWorker.size === 0) return [];
  const out = [
    '# HELP sluice_thread_requests_total Requests served, by the thread that served them (server.workers; 0 is the main thread).',
    '# TYPE sluice_thread_requests_total counter',
    `sluice_thread_requests_total{thread="0"} ${stats.served}`,
  ];
  for (const [i, n] of [...stats.servedByWorker].sort((a, b) => a[0] - b[0]))
    out.push(`sluice_thread_requests_total{thread="${i}"} ${n}`);
  return out;
}
