/**
 * A running Sluice: loads the config, starts the embedded simulated nodes when the config asks for
 * them, compiles the first plan, binds the listeners and the admin API, and owns reload and
 * shutdown. Reload is all-or-nothing: a config that fails any check leaves the running plan as is.
 */
import {
  formatConfigError,
  loadCheckedPlugins,
  loadConfigFile,
  loadConfigText,
} from '../../config/loader.js';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { SluiceConfig } from '../../config/types.js';
import type { SimFleet } from '../../loadtest/sim/fleet.js';
import { AdminServer, type AdminTarget, type DrainResult } from '../admin/admin-server.js';
import { AdminAuth } from '../admin/admin-auth.js';
import { redactedConfig } from '../admin/config-view.js';
import { histogramsView } from '../admin/histograms-view.js';
import { statsView } from '../admin/stats-view.js';
import { statusPageHtml } from '../admin/status-page.js';
import { EventLoopMonitor } from '../metrics/event-loop-monitor.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { PoolMember } from '../balance/balance-policy.js';
import type { Pool } from '../pool/pool.js';
import { CapacityMonitor } from '../capacity/capacity-monitor.js';
import { capacityView } from '../capacity/capacity-view.js';
import { capacityPoolsOf } from '../capacity/plan-pools.js';
import { renderPrometheus } from '../metrics/prometheus.js';
import { MicroBatcherStats } from '../batch/batch-stats.js';
import { StatsRegistry } from '../metrics/stats.js';
import { compilePlan, type CompileContext, type Plan } from '../plan/plan.js';
import { RuntimeState } from '../plan/runtime-state.js';
import { RedisStore } from '../ratelimit/redis-store.js';
import { ProxyServer, type BoundListener } from '../server/proxy-server.js';
import { NEVER_SHED } from '../server/load-shedder.js';
import { loadTlsMaterial, type TlsMaterial } from '../server/tls-material.js';
import { BatchService } from '../batch-api/batch-service.js';
import { NodeRegistry } from '../upstream/node-registry.js';
import { SharedTable } from './shared-table.js';
import { sharedListenerPorts } from '../server/proxy-server.js';
import { absorbStatsDelta, DeltaMemo, takeStatsDelta, type StatsDelta } from '../metrics/stats-delta.js';
import { WorkerSet } from './worker-set.js';
import { availableCores, resolveThreads, type ThreadCount } from './thread-count.js';
import { perThreadFeatures } from '../../config/semantic-checks.js';
import { formatConfigPath } from '../../config/config-issue.js';
import {
  HEALTH_MIRROR_MS,
  judgeOutcomes,
  OutcomeRelay,
  publishHealth,
  readHealth,
  type OutcomeBatch,
} from './health-mirror.js';
import { ConfigWatcher } from './config-watcher.js';
import type { LoadedPlugin } from '../plugin/plugin-loader.js';
import type { PluginInstance } from '../plugin/plugin-chain.js';
import { PluginRuntime } from '../plugin/plugin-runtime.js';
import { dirname, resolve } from 'node:path';
import { AccessLog } from '../metrics/access-log.js';
import { redisPackage } from './optional-modules.js';
import { OtlpExporter } from '../metrics/otlp-exporter.js';
import { Tracer } from '../metrics/trace-context.js';
import { sluiceVersion } from '../cli/version.js';
import { createLogger, type Logger } from './logger.js';
import { OverloadMonitor } from './overload-monitor.js';
import {
  acceptRelayedItem,
  type BatchRelayClient,
  type RelayedItem,
  type RelayedResult,
} from './batch-relay.js';
import { RemoteAdmissions } from './admission-relay.js';
import {
  RelayedCalls,
  type EndpointRelayClient,
  type RelayedCallDone,
  type RelayedCallStart,
} from './endpoint-relay.js';

export interface SluiceOptions {
  /** Path of the YAML file; reloads re-read it. */
  configPath: string;
  /** Watch the file's directory and reload on change. Default true. */
  watch?: boolean;
  logger?: Logger;
  /**
   * The cores `server.workers: auto` counts (thread-count.ts); default: those this process may use
   * (`availableCores`). An embedder that wants one thread whatever the machine passes 1.
   */
  cores?: number;
}

/** The outcome of a reload, as the admin API returns it. */
export interface ReloadResult {
  /** `applied`, `unchanged` or `rejected`. */
  result: 'applied' | 'unchanged' | 'rejected';
  version: number;
  /** Formatted `file:line:col path: message` lines when rejected. */
  errors: string[];
  /** TLS listeners whose certificate was swapped by this reload (it may be `unchanged` otherwise). */
  certificates: string[];
}

/** Raised by `startSluice` when the config file is invalid. */
export class ConfigInvalidError extends Error {
  readonly errors: string[];
  constructor(errors: string[]) {
    super(`invalid config:\n${errors.join('\n')}`);
    this.errors = errors;
  }
}

/** Parts of the config that bind sockets or processes, by name; a reload cannot change them. */
function restartOnly(c: SluiceConfig): [string, string][] {
  const parts: [string, unknown][] = [
    // A listener's plugin list and certificate files are reloadable; its socket, and whether it
    // serves TLS, are not.
    ['listeners', c.listeners.map((l) => ({ ...l, plugins: undefined, tls: l.tls !== undefined }))],
    ['plugin_store', c.plugin_store],
    ['admin', c.admin],
    ['simulator', c.simulator ?? null],
    ['rate_limits.store', c.rate_limits.store],
    ['rate_limits.redis', c.rate_limits.redis ?? null],
    [BATCH_API_PRESENCE, c.batch_api === undefined],
    ['batch_api.endpoints', c.batch_api?.endpoints ?? null],
    ['batch_api.jobs', c.batch_api?.jobs ?? null],
    ['batch_api.idempotency', c.batch_api?.idempotency ?? null],
    ['metrics', c.metrics],
    ['server.workers', c.server.workers],
    ['access_log', c.access_log ?? null],
    ['tracing', c.tracing ?? null],
  ];
  return parts.map(([name, v]) => [name, JSON.stringify(v)]);
}

/** The names of the restart-only parts that differ between `a` and `b`. */
function restartOnlyChanges(a: SluiceConfig, b: SluiceConfig): string[] {
  const before = restartOnly(a);
  const changed = restartOnly(b)
    .filter(([, v], i) => v !== before[i]![1])
    .map(([name]) => name);
  // A batch_api added or removed changes its parts too: the presence says it.
  return changed.includes(BATCH_API_PRESENCE) ? changed.filter((n) => !n.startsWith('batch_api.')) : changed;
}

const BATCH_API_PRESENCE = 'batch_api (present or not)';

/** The origin of `name` when it is an http(s) URL (`HTTP://A:80/` → `http://a`), else null. */
function urlOrigin(name: string): string | null {
  if (!/^https?:\/\//i.test(name)) return null;
  try {
    return new URL(name).origin;
  } catch {
    return null;
  }
}

export class Sluice {
  readonly configPath: string;
  readonly log: Logger;
  readonly stats = new StatsRegistry();
  readonly registry: NodeRegistry;
  /** What the threads of `server.workers` share (shared-table.ts). */
  readonly shared: SharedTable;
  /** Pool budgets, health trackers and sticky tables, kept across reloads. */
  readonly runtime: RuntimeState;
  /** Plugin metrics and key-value store, kept across reloads. */
  readonly plugins: PluginRuntime;
  listeners: BoundListener[] = [];
  adminPort = 0;
  sim: SimFleet | null = null;
  private plan!: Plan;
  private server: ProxyServer | null = null;
  /** The batch API and its job worker, when the config has `batch_api`. */
  batch: BatchService | null = null;
  private admin: AdminServer | null = null;
  /** Event-loop delay sampler. */
  private eventLoop: EventLoopMonitor | null = null;
  /** True once the first plan is compiled. */
  private planned = false;
  /** True once the listeners are bound. */
  private serving = false;
  /** Process start, Unix ms (for uptime). */
  private readonly startedAtMs = Date.now();
  /** The OTLP exporter, when tracing is configured. */
  exporter: OtlpExporter | null = null;
  /** Per-pool capacity estimate, sampled off the request path. */
  private capacity: CapacityMonitor | null = null;
  private watcher: ConfigWatcher | null = null;
  /** The checked certificate of each TLS listener, by listener name. */
  private tls = new Map<string, TlsMaterial>();
  /** Overload protection (`server.overload`), null while it is off. */
  overload: OverloadMonitor | null = null;
  private reloading: Promise<ReloadResult> | null = null;
  /** The reload that runs once `reloading` ends, shared by the calls that came meanwhile. */
  private queuedReload: Promise<ReloadResult> | null = null;
  private queuedFromWatch = false;
  /** The worker threads (`server.workers` above 1), in the main thread; null otherwise. */
  workers: WorkerSet | null = null;
  /**
   * In a worker thread, where its access-log lines go (the main thread writes them); null: this
   * thread writes its own.
   */
  accessLogRelay: ((text: string) => void) | null = null;
  /**
   * In a worker thread, where its batching routes' items go: the main thread batches them
   * (batch-relay.ts); null in the main thread.
   */
  batchRelay: BatchRelayClient | null = null;
  /**
   * In a worker thread with the batch API, the endpoints it passes on to the main thread
   * (endpoint-relay.ts); null in the main thread.
   */
  endpointRelay: EndpointRelayClient | null = null;
  /** In the main thread: the batch API requests workers passed on, being answered. */
  readonly relayedCalls = new RelayedCalls();
  /** In the main thread: workers' requests to pools with a reserve, in its controllers. */
  readonly remoteAdmissions = new RemoteAdmissions();
  /** How many threads serve the listeners, and why (fixed at start). */
  threadCount: ThreadCount = { threads: 1, reason: 'server.workers 1' };
  /** In a worker thread: what its metric reports already counted (stats-delta.ts). */
  private readonly reported = new DeltaMemo();
  /** In a worker thread: its attempt outcomes on their way to the main thread (health-mirror.ts). */
  private outcomes: OutcomeRelay | null = null;
  /** Publishes (main thread) or reads (worker) node health verdicts; null with one thread. */
  private healthTimer: NodeJS.Timeout | null = null;

  /**
   * `shared`: the state the threads of `server.workers` share (nodes' in-flight counts, limits);
   * a table in a SharedArrayBuffer (`new SharedTable({ shared: true })`) when the config runs worker
   * threads, which `startSluice` makes.
   */
  constructor(
    configPath: string,
    log: Logger,
    shared: SharedTable = new SharedTable(),
    sticky?: SharedArrayBuffer,
  ) {
    this.configPath = configPath;
    this.log = log;
    this.plugins = new PluginRuntime(log);
    this.shared = shared;
    this.registry = new NodeRegistry(shared);
    this.runtime = new RuntimeState(shared.shared ? shared : null, sticky);
  }

  private compileContext(plugins: ReadonlyMap<string, PluginInstance>): CompileContext {
    return {
      registry: this.registry,
      stats: this.stats,
      runtime: this.runtime,
      log: this.log,
      plugins,
      batchRelay: this.batchRelay,
    };
  }

  /**
   * The main thread's part of micro-batching under `server.workers`: batches an item a worker
   * thread relayed (batch-relay.ts) in the current plan's batcher and answers through `reply`.
   */
  acceptBatchItem(m: RelayedItem, reply: (r: RelayedResult) => void): void {
    acceptRelayedItem(this.plan, m, reply);
  }

  /**
   * The main thread's part of the batch API under `server.workers`: answers a request worker
   * `index` passed on (endpoint-relay.ts) with this thread's batch API, once, through `reply`.
   */
  acceptEndpointCall(index: number, m: RelayedCallStart, reply: (r: RelayedCallDone) => void): void {
    this.relayedCalls.start(index, m, this.server, this.batch?.api ?? null, this.plan, reply);
  }

  /** The plan new requests run on. */
  get current(): Plan {
    return this.plan;
  }

  /** Starts everything described by `config`. Rejects (after cleaning up) if a socket cannot be bound. */
  async start(
    config: SluiceConfig,
    digest: string,
    watchFile: boolean,
    plugins: readonly LoadedPlugin[] = [],
    count: ThreadCount = resolveThreads(config, 1),
  ): Promise<void> {
    const threads = count.threads;
    this.threadCount = count;
    if (threads > 1 && !this.shared.shared)
      throw new Error(
        'server.workers above 1 needs a Sluice made with a SharedTable in shared memory (startSluice makes one)',
      );
    try {
      this.observe(config);
      // The admin listener comes first: /healthz answers and /readyz says 503 until traffic is served.
      this.admin = new AdminServer(this.adminTarget(), new AdminAuth(config.admin.token));
      this.adminPort = await this.admin.listen(config.admin.address, config.admin.port);
      if (config.simulator !== undefined) {
        const s = config.simulator;
        // Loaded only when asked for: a production config never pulls the simulator in.
        const { startSimFleet } = await import('../../loadtest/sim/fleet.js');
        this.sim = await startSimFleet({
          nodes: s.nodes,
          address: s.address,
          port: s.port,
          profile: s.profile,
        });
        this.log.info(`simulator: ${s.nodes} nodes (${s.profile}) at ${this.sim.urls.join(' ')}`);
      }
      // The Redis stores are fixed for the process but created on first use, which may be a reload
      // that adds tenants or plugins: load the package now, while nothing is served yet, not then
      // (loading it takes a few hundred ms of the event loop).
      if (config.rate_limits.store === 'redis' || config.plugin_store.store === 'redis') redisPackage();
      const instances = await this.plugins.createInstances(plugins, config.plugin_store, this.configPath);
      try {
        this.plan = compilePlan(1, config, digest, this.compileContext(instances));
      } catch (e) {
        for (const i of instances.values()) await i.close();
        throw e;
      }
      this.planned = true;
      // Wrong credentials are a configuration error, not an outage to fail open or closed through.
      const store = this.runtime.limiter?.store;
      if (store instanceof RedisStore) await store.checkCredentials();
      this.capacity = new CapacityMonitor({ pools: () => capacityPoolsOf(this.plan) });
      this.capacity.start();
      this.server = new ProxyServer(this.stats, () => this.plan, this.runtime.shared);
      this.applyOverload(config);
      if (config.batch_api !== undefined) {
        this.batch = await BatchService.start(config.batch_api, {
          host: this.server,
          plan: () => this.plan,
          configPath: this.configPath,
          log: this.log,
        });
        this.server.endpoints = this.batch.api;
      }
      const tls = await this.loadTls(config);
      if (Array.isArray(tls)) throw new ConfigInvalidError(tls);
      this.tls = tls;
      const listening = threads > 1 ? await sharedListenerPorts(config.listeners) : config.listeners;
      this.listeners = await this.server.listen(listening, tls, threads > 1);
      if (threads > 1) {
        // The main thread judges node health for all threads and publishes its verdicts.
        publishHealth(this.plan, this.shared);
        this.healthTimer = setInterval(() => publishHealth(this.plan, this.shared), HEALTH_MIRROR_MS);
        this.healthTimer.unref();
        const ports: Record<string, number> = {};
        for (const l of this.listeners) ports[l.name] = l.port;
        this.workers = await WorkerSet.start(
          threads - 1,
          {
            configPath: this.configPath,
            config,
            digest,
            ports,
            shared: this.shared.buffer as SharedArrayBuffer,
            sharedSlots: this.shared.capacity,
            sticky: this.runtime.stickyBuffer!,
            reportMs: WORKER_REPORT_MS,
          },
          this.log,
          (index, delta) => this.absorbWorker(index, delta),
          (batches) => judgeOutcomes(this.plan, batches),
          (lines) => this.stats.accessLog?.writeLines(lines),
          {
            batchItem: (_index, m, reply) => this.acceptBatchItem(m, reply),
            endpointCall: (index, m, reply) => this.acceptEndpointCall(index, m, reply),
            endpointAbort: (index, id) => this.relayedCalls.abort(index, id),
            admissionOffer: (index, m, reply) =>
              this.remoteAdmissions.offer(index, m, this.runtime.pools.get(m.pool)?.admission ?? null, reply),
            admissionEnd: (index, m) => this.remoteAdmissions.end(index, m.id, m.latencyMs),
          },
          (index, ledger) => this.workerDied(index, ledger),
        );
      }
      this.log.info(`serving with ${threads} ${threads === 1 ? 'thread' : 'threads'} (${count.reason})`);
      this.serving = true;
      this.batch?.startWorker();
      if (watchFile)
        this.watcher = new ConfigWatcher(
          this.watchedFiles(),
          config.server.reload_debounce_ms,
          () => void this.reload(true),
        );
    } catch (e) {
      await this.close();
      throw e;
    }
  }

  /** What the admin listener reads and drives. */
  private adminTarget(): AdminTarget {
    return {
      ready: () =>
        this.serving &&
        this.server !== null &&
        !this.server.draining &&
        (this.workers === null || this.workers.allRunning),
      started: () => this.planned,
      refresh: async () => {
        if (this.workers !== null) await this.workers.report();
      },
      metricsText: () =>
        renderPrometheus({
          stats: this.stats,
          nodes: this.registry.all(),
          retiredNodes: this.registry.retired,
          pools: this.runtime.pools.values(),
          limiter: this.runtime.limiter?.counters ?? null,
          limiterLoad: this.runtime.limiter,
          batchers: this.plan.routes.routes.flatMap((r) => {
            if (r.batchers === null) return [];
            if (r.batchers.length === 1)
              return [[r.name, r.batchers[0]!.batcher.stats] as [string, MicroBatcherStats]];
            // A split route has a batcher per pool: reported as the route's one.
            const sum = new MicroBatcherStats();
            for (const b of r.batchers) sum.add(b.batcher.stats);
            return [[r.name, sum] as [string, MicroBatcherStats]];
          }),
          configVersion: this.plan.version,
          draining: this.server?.draining ?? false,
          overload: this.overload,
          tls: this.server?.tlsListeners().map((l) => ({
            listener: l.name,
            notAfter: l.apps.material.notAfter,
            swaps: l.apps.swaps,
            // With worker threads, every thread's connections (each holds its own certificates).
            retiredConnections:
              l.apps.retiredConnections +
              [...this.stats.remote.values()].reduce((n, g) => n + (g.tlsRetired.get(l.name) ?? 0), 0),
          })),
          capacity: this.capacity?.reports() ?? [],
          plugins: this.plugins.metrics,
          ...(this.batch === null ? {} : { batchApi: this.batch.metrics() }),
          members: this.members(),
          eventLoop: this.eventLoop,
          tracing: this.exporter?.stats ?? null,
          accessLog: this.stats.accessLog,
        }),
      configView: () => ({
        version: this.plan.version,
        digest: this.plan.digest,
        applied_at: this.plan.appliedAt.toISOString(),
        threads: this.threadCount.threads,
        threads_reason: this.threadCount.reason,
        config: redactedConfig(this.plan.config),
      }),
      nodesView: () => this.nodesView(),
      statsView: (detail) =>
        statsView({
          series: this.stats.series,
          refused: this.stats.refused,
          config: this.plan.config,
          configVersion: this.plan.version,
          inFlight: this.stats.inFlightAll,
          draining: this.server?.draining ?? false,
          eventLoop: this.eventLoop,
          startedAtMs: this.startedAtMs,
          detail,
        }),
      histogramsView: (query) => histogramsView(this.stats.series, query),
      drainNode: (pool, node, drained) => this.drainNode(pool, node, drained),
      capacityView: () => capacityView(this.capacity?.reports() ?? []),
      reload: async () => {
        const r = await this.reload();
        return { ok: r.result !== 'rejected', status: r.result === 'rejected' ? 422 : 200, body: r };
      },
      statusPage: () => statusPageHtml(),
    };
  }

  /** Every node of the current plan with its pool. */
  private members(): { pool: string; node: UpstreamNode; ejected: boolean }[] {
    const out: { pool: string; node: UpstreamNode; ejected: boolean }[] = [];
    for (const p of this.plan.pools.values()) {
      const ejected = new Set(
        (p.state.health?.snapshot().nodes ?? []).filter((n) => n.ejected).map((n) => n.id),
      );
      for (const m of p.members) out.push({ pool: p.name, node: m.node, ejected: ejected.has(m.node.id) });
    }
    return out;
  }

  /**
   * Drains or undrains node `name` of pool `poolName`: `name` is the node's id (its URL), its
   * `host:port`, or its index in the pool. 404 when there is no such pool or node.
   */
  drainNode(poolName: string, name: string, drained: boolean): DrainResult {
    const pool = this.plan.pools.get(poolName);
    if (pool === undefined)
      return {
        status: 404,
        body: {
          error: {
            message: `no pool ${poolName}`,
            type: 'invalid_request_error',
            param: null,
            code: 'not_found',
          },
        },
      };
    const members = pool.members;
    // A URL in any form the config accepts (`HTTP://Host:8000/`), normalised as the config's are.
    const origin = urlOrigin(name);
    const m =
      members.find(
        (x) => x.node.id === name || x.node.id === origin || x.node.id.replace(/^https?:\/\//, '') === name,
      ) ?? (/^\d+$/.test(name) ? members[Number(name)] : undefined);
    if (m === undefined)
      return {
        status: 404,
        body: {
          error: {
            message: `pool ${poolName} has no node ${name}`,
            type: 'invalid_request_error',
            param: null,
            code: 'not_found',
          },
        },
      };
    const was = m.node.drained;
    this.registry.setDrained(m.node, drained);
    pool.state.servingChanged();
    this.workers?.drainNode(poolName, m.node.id, drained);
    if (was !== drained)
      this.log.info(`node ${m.node.id} of pool ${poolName} ${drained ? 'drained' : 'undrained'} (admin)`);
    return { status: 200, body: { pool: poolName, node: m.node.id, drained, in_flight: m.node.inFlight } };
  }

  /**
   * Sets up the histogram windows, the access log and tracing from the config (start only). A
   * worker thread keeps no windows (its reports empty its histograms; the main thread's hold them).
   */
  private observe(config: SluiceConfig, worker = false): void {
    const m = config.metrics;
    this.stats.series.configure({ slices: m.window_slices, sliceMs: m.window_slice_ms });
    if (!worker) {
      this.stats.series.start();
      this.eventLoop = new EventLoopMonitor(this.stats.series.shape);
      this.eventLoop.start();
    }
    const a = config.access_log;
    if (a !== undefined && a.enabled) {
      const dest =
        a.destination === 'stdout' || a.destination === 'stderr'
          ? a.destination
          : resolve(dirname(this.configPath), a.destination);
      this.stats.accessLog = new AccessLog({
        destination: dest,
        level: a.level,
        sampleRate: a.sample_rate,
        ...(worker && this.accessLogRelay !== null ? { relay: this.accessLogRelay } : {}),
      });
    }
    const t = config.tracing;
    if (t !== undefined) {
      this.exporter = new OtlpExporter({
        endpoint: t.endpoint,
        serviceName: t.service_name,
        maxQueueSpans: t.max_queue_spans,
        maxBatchSpans: t.max_batch_spans,
        flushIntervalMs: t.flush_interval_ms,
        timeoutMs: t.timeout_ms,
        version: sluiceVersion(),
      });
      this.stats.tracer = new Tracer(this.exporter, { sampleRatio: t.sample_ratio });
    }
  }

  private nodesView(): unknown {
    return [...this.plan.pools.values()].map((p) => ({
      pool: p.name,
      policy: p.policy.kind,
      retries: p.state.retries,
      retry_budget_refused: p.state.retryBudget.refused,
      hedges: p.state.hedges,
      hedge_wins: p.state.hedgeWins,
      no_node: p.state.noNode,
      fallback_served: p.state.fellBack,
      nodes: p.members.map((m) => this.nodeView(p, m)),
      health: p.state.health?.snapshot() ?? null,
    }));
  }

  /** One node of `/admin/nodes`: its counters over every object a reload made for it. */
  private nodeView(p: Pool, m: PoolMember): unknown {
    const totals = this.registry.totals(m.node);
    return {
      id: m.node.id,
      weight: m.weight,
      available: m.node.available,
      saturated: m.node.saturated,
      weight_factor: m.node.weightFactor,
      in_flight: totals.inFlight,
      in_flight_tokens: p.policy.weighsCost ? m.node.inFlightCost : null,
      ttfb_ewma_ms: m.node.ttfbEwmaMs < 0 ? null : Math.round(m.node.ttfbEwmaMs * 100) / 100,
      prefill_queue_tokens: m.node.timing.pendingTokens,
      ttft_ms_per_token: learnedRate(m.node.timing.ttftRate.perUnit()),
      ttft_base_ms: learnedRate(m.node.timing.ttftRate.base()),
      head_ms_per_token: learnedRate(m.node.timing.headRate.perUnit()),
      head_base_ms: learnedRate(m.node.timing.headRate.base()),
      drained: m.node.drained,
      attempts: totals.attempts,
      failures: totals.failures,
    };
  }

  /**
   * Re-reads the config file and swaps in a new plan if it is valid and different. Requests in
   * flight finish on the plan they started with. A call during a reload gets the result of one more
   * reload that starts when it ends (the file may have changed since that one read it), shared by
   * every call that came meanwhile: an operator's `POST /admin/reload` answers for the file as it
   * was when asked, never for an older read of it.
   * `fromWatch` (a file-system event, not an operator) waits until the file stops changing, so a
   * file caught half-written is never applied.
   */
  reload(fromWatch = false): Promise<ReloadResult> {
    if (this.queuedReload !== null) {
      this.queuedFromWatch ||= fromWatch;
      return this.queuedReload;
    }
    const running = this.reloading;
    if (running === null) return this.startReload(fromWatch);
    this.queuedFromWatch = fromWatch;
    const next = (): Promise<ReloadResult> => {
      const watched = this.queuedFromWatch;
      this.queuedFromWatch = false;
      const p = this.startReload(watched);
      this.queuedReload = null;
      return p;
    };
    this.queuedReload = running.then(next, next);
    return this.queuedReload;
  }

  private startReload(fromWatch: boolean): Promise<ReloadResult> {
    const p = this.doReload(fromWatch).finally(() => {
      if (this.reloading === p) this.reloading = null;
    });
    this.reloading = p;
    return p;
  }

  private async doReload(fromWatch: boolean): Promise<ReloadResult> {
    let text: string;
    try {
      text = fromWatch
        ? await readSettled(
            this.configPath,
            Math.max(SETTLE_FLOOR_MS, this.plan.config.server.reload_debounce_ms),
          )
        : await readFile(this.configPath, 'utf8');
    } catch (e) {
      return this.rejectReload([
        `${this.configPath}:1:1 cannot read the config file: ${(e as Error).message}`,
      ]);
    }
    // Unchanged bytes need no parse: watch events for other files and editors' temp files are cheap.
    // The certificates are read again all the same (renewed in place, or by a Secret update). An
    // operator's reload of a config with plugins makes them again even so: a plugin module, or a
    // file a plugin reads (auth-jwt's JWKS), may have changed while the config did not.
    const samePlugins = fromWatch || this.plan.config.plugins.length === 0;
    if (samePlugins && createHash('sha256').update(text).digest('hex') === this.plan.digest) {
      const tls = await this.loadTls(this.plan.config);
      if (Array.isArray(tls)) return this.rejectReload(tls);
      const swapped = this.swapChanged(tls);
      if (typeof swapped === 'string') return this.rejectReload([swapped]);
      // Each worker serves its own copy of the certificates: it reads the files again too.
      const errors = swapped.length > 0 && this.workers !== null ? await this.workers.certificates() : [];
      for (const e of errors) this.log.error(`reload: ${e}`);
      return { result: 'unchanged', version: this.plan.version, errors, certificates: swapped };
    }
    const loaded = await loadConfigText(text, this.configPath);
    if (!loaded.ok) return this.rejectReload(loaded.errors.map(formatConfigError));
    const fixed = restartOnlyChanges(this.plan.config, loaded.config);
    if (fixed.length > 0) {
      return this.rejectReload([
        `${this.configPath}: ${fixed.join(', ')} changed, which cannot change while running; restart Sluice to apply it`,
      ]);
    }
    // `auto` chose the threads at start; what they cannot share waits for a restart, which will
    // choose one thread for it. (A number above 1 already refused it at load.)
    if (this.threadCount.threads > 1 && loaded.config.server.workers === 'auto') {
      const perThread = perThreadFeatures(loaded.config as unknown as Record<string, unknown>);
      if (perThread.length > 0)
        return this.rejectReload(
          perThread.map(
            (f) =>
              `${this.configPath}: ${formatConfigPath(f.path)}: ${f.what} is not shared across worker threads yet, and this process serves with ${this.threadCount.threads} threads (${this.threadCount.reason}); restart Sluice to serve it on one thread${f.learnsPerThread === true ? '' : `, or ${f.instead}`}`,
          ),
        );
    }
    const tls = await this.loadTls(loaded.config);
    if (Array.isArray(tls)) return this.rejectReload(tls);
    const old = this.plan;
    let next: Plan;
    let instances: Map<string, PluginInstance>;
    try {
      instances = await this.plugins.createInstances(
        loaded.plugins ?? [],
        loaded.config.plugin_store,
        this.configPath,
      );
    } catch (e) {
      return this.rejectReload([`${this.configPath}: ${(e as Error).message}`]);
    }
    // The certificates first: a swap that fails leaves nothing else changed, whereas the compile
    // reconfigures shared state (limits, budgets, health) once its checks pass.
    const served = new Map(this.tls);
    const swapped = this.swapChanged(tls);
    if (typeof swapped === 'string') {
      for (const i of instances.values()) await i.close();
      return this.rejectReload([swapped]);
    }
    try {
      next = compilePlan(old.version + 1, loaded.config, loaded.digest, this.compileContext(instances));
    } catch (e) {
      // The certificates served before come back first, before anything awaits.
      if (swapped.length > 0) {
        const back = this.swapChanged(served);
        if (typeof back === 'string')
          this.log.error(`reload: the previous certificate could not be restored: ${back}`);
      }
      for (const i of instances.values()) await i.close();
      return this.rejectReload([`${this.configPath}: ${(e as Error).message}`]);
    }
    this.swapPlan(next, loaded.config);
    this.stats.countReload('applied');
    this.watcher?.setFiles(this.watchedFiles());
    this.log.info(`config reloaded: version ${next.version} (${loaded.digest.slice(0, 12)})`);
    // The workers compile the same config; they fail only where their environment differs (a plugin
    // module that cannot load there), which is logged and reported with the result.
    const errors = this.workers === null ? [] : await this.workers.reload(loaded.config, loaded.digest);
    for (const e of errors) this.log.error(`reload: ${e}`);
    return { result: 'applied', version: next.version, errors, certificates: swapped };
  }

  /** Makes `next` the plan new requests run on; the old one retires when its requests end. */
  private swapPlan(next: Plan, config: SluiceConfig): void {
    const old = this.plan;
    this.plan = next;
    this.applyOverload(config);
    old.adoptOrphans(next.removedPools);
    next.removedPools = [];
    old.retire();
  }

  /**
   * Starts a worker thread's share of `server.workers`: the listeners on the ports the main thread
   * bound (`ports`, by listener name), with a plan compiled from the same config; no admin API,
   * simulator, config watcher or capacity monitor (the main thread runs those). Its metrics go to
   * the main thread through `takeReport`.
   */
  async startWorker(
    config: SluiceConfig,
    digest: string,
    plugins: readonly LoadedPlugin[],
    ports: Readonly<Record<string, number>>,
  ): Promise<void> {
    try {
      this.observe(config, true);
      this.outcomes = new OutcomeRelay();
      this.runtime.healthRelay = this.outcomes.record;
      if (config.rate_limits.store === 'redis' || config.plugin_store.store === 'redis') redisPackage();
      const instances = await this.plugins.createInstances(plugins, config.plugin_store, this.configPath);
      try {
        this.plan = compilePlan(1, config, digest, this.compileContext(instances));
      } catch (e) {
        for (const i of instances.values()) await i.close();
        throw e;
      }
      this.planned = true;
      this.server = new ProxyServer(this.stats, () => this.plan, this.runtime.shared);
      this.server.endpoints = this.endpointRelay;
      this.applyOverload(config);
      const listeners = config.listeners.map((l) => ({ ...l, port: ports[l.name] ?? l.port }));
      readHealth(this.plan, this.shared);
      // The certificates as this thread reads them (the main thread checked the same files).
      const tls = await this.loadTls(config);
      if (Array.isArray(tls)) throw new Error(tls.join('\n'));
      this.tls = tls;
      this.listeners = await this.server.listen(listeners, tls, true);
      this.serving = true;
    } catch (e) {
      await this.close();
      throw e;
    }
  }

  /**
   * A worker thread's reload: applies `config` (digest `digest`), which the main thread has checked
   * and applied. Resolves to the errors (empty when applied).
   */
  async applyWorkerConfig(config: SluiceConfig, digest: string): Promise<string[]> {
    const checked = await loadCheckedPlugins(config, this.configPath);
    if (!checked.ok) return checked.errors;
    const tls = await this.loadTls(config);
    if (Array.isArray(tls)) return tls;
    const served = new Map(this.tls);
    const swapped = this.swapChanged(tls);
    if (typeof swapped === 'string') return [swapped];
    // A failed compile puts the certificates served before back, as the main thread does.
    const restore = (): void => {
      if (swapped.length === 0) return;
      const back = this.swapChanged(served);
      if (typeof back === 'string')
        this.log.error(`reload: the previous certificate could not be restored: ${back}`);
    };
    let instances: Map<string, PluginInstance>;
    try {
      instances = await this.plugins.createInstances(checked.plugins, config.plugin_store, this.configPath);
    } catch (e) {
      restore();
      return [`${this.configPath}: ${(e as Error).message}`];
    }
    let next: Plan;
    try {
      next = compilePlan(this.plan.version + 1, config, digest, this.compileContext(instances));
    } catch (e) {
      restore();
      for (const i of instances.values()) await i.close();
      return [`${this.configPath}: ${(e as Error).message}`];
    }
    this.swapPlan(next, config);
    return [];
  }

  /**
   * A worker thread's part of a reload that found certificate files renewed under an unchanged
   * config: reads this thread's TLS listeners' files again and swaps in what changed. Resolves to
   * the errors (empty when done).
   */
  async refreshCertificates(): Promise<string[]> {
    const tls = await this.loadTls(this.plan.config);
    if (Array.isArray(tls)) return tls;
    const swapped = this.swapChanged(tls);
    return typeof swapped === 'string' ? [swapped] : [];
  }

  /**
   * A worker thread's health step (every HEALTH_MIRROR_MS): the main thread's verdicts copied into
   * this thread's nodes; returns this thread's attempt outcomes since the last step, or null.
   */
  healthStep(): OutcomeBatch[] | null {
    if (this.planned) readHealth(this.plan, this.shared);
    return this.outcomes?.take() ?? null;
  }

  /** A worker thread's metrics since its last report (stats-delta.ts). */
  takeReport(): StatsDelta {
    return takeStatsDelta(
      {
        stats: this.stats,
        registry: this.registry,
        pools: this.runtime.pools.values(),
        limiter: this.runtime.limiter,
        plugins: this.plugins.metrics,
        tlsRetired: (this.server?.tlsListeners() ?? []).map((l) => [l.name, l.apps.retiredConnections]),
      },
      this.reported,
    );
  }

  /**
   * A worker thread died (not stopped): what it held of the shared counts (requests in flight per
   * node, concurrency and admission slots, connections) is taken back, the shared table's lock if
   * it held it is freed, its relayed batch API calls stop, and its last reported gauges no longer
   * count; its replacement reports afresh.
   */
  private workerDied(index: number, ledger: Int32Array): void {
    // Its clients went with it: the batch API requests it passed on stop.
    this.relayedCalls.workerDied(index);
    // A lock it held when it died would stop every thread at their next take of it.
    if (this.shared.releaseLockOf(index))
      this.log.error(`worker ${index}: died holding the shared table's lock; freed`);
    const held = this.remoteAdmissions.workerDied(index);
    if (held > 0) this.log.warn(`worker ${index}: released the ${held} admission slots and places it held`);
    const n = this.shared.release(ledger);
    this.stats.remote.delete(index);
    this.log.warn(`worker ${index}: released the ${n} shared counts it held`);
  }

  /** Adds worker `index`'s report to this thread's metrics. */
  private absorbWorker(index: number, delta: StatsDelta): void {
    if (!this.planned) return;
    absorbStatsDelta(
      {
        stats: this.stats,
        node: (pool, id) => this.plan.pools.get(pool)?.members.find((m) => m.node.id === id)?.node,
        pool: (name) => this.runtime.pools.get(name),
        limiter: this.runtime.limiter,
        plugins: this.plugins.metrics,
      },
      index,
      delta,
    );
  }

  /**
   * Reads and checks the certificate and key of every TLS listener of `config`: the materials by
   * listener name, or the error lines (one per listener that cannot serve).
   */
  private async loadTls(config: SluiceConfig): Promise<Map<string, TlsMaterial> | string[]> {
    const out = new Map<string, TlsMaterial>();
    const errors: string[] = [];
    const dir = dirname(this.configPath);
    for (const [i, l] of config.listeners.entries()) {
      if (l.tls === undefined) continue;
      try {
        out.set(l.name, await loadTlsMaterial(l.tls, dir));
      } catch (e) {
        errors.push(`${this.configPath}: listeners[${i}].tls: ${(e as Error).message}`);
      }
    }
    return errors.length > 0 ? errors : out;
  }

  /**
   * Swaps in every certificate of `tls` that differs from the one served (all or none): the names
   * of the listeners swapped, or why uWS refused one.
   */
  private swapChanged(tls: ReadonlyMap<string, TlsMaterial>): string[] | string {
    const changed = new Map<string, TlsMaterial>();
    for (const [name, m] of tls) if (this.tls.get(name)?.digest !== m.digest) changed.set(name, m);
    if (changed.size === 0) return [];
    try {
      this.server!.swapCertificates(changed);
    } catch (e) {
      return `${this.configPath}: the new certificate could not be loaded: ${(e as Error).message}`;
    }
    for (const [name, m] of changed) {
      this.tls.set(name, m);
      this.log.info(
        `listener ${name}: new certificate (${m.subject}, valid until ${m.notAfter.toISOString()}) for new connections`,
      );
    }
    this.watcher?.setFiles(this.watchedFiles());
    return [...changed.keys()];
  }

  /** The files a change of which may need a reload: the config and every certificate and key. */
  private watchedFiles(): string[] {
    const files = [this.configPath];
    for (const m of this.tls.values()) files.push(m.certFile, m.keyFile);
    return files;
  }

  /** Starts, reconfigures or stops overload protection as `config.server.overload` says. */
  private applyOverload(config: SluiceConfig): void {
    const o = config.server.overload;
    if (!OverloadMonitor.enabled(o)) {
      this.overload?.close();
      this.overload = null;
      if (this.server !== null) this.server.shedder = NEVER_SHED;
      return;
    }
    if (this.overload === null) {
      this.overload = new OverloadMonitor(o, this.log);
      this.overload.start();
    } else this.overload.configure(o);
    if (this.server !== null) this.server.shedder = this.overload;
  }

  private rejectReload(errors: string[]): ReloadResult {
    this.stats.countReload('rejected');
    this.log.error(
      `config reload rejected, still serving version ${this.plan.version}:\n  ${errors.join('\n  ')}`,
    );
    return { result: 'rejected', version: this.plan.version, errors, certificates: [] };
  }

  /**
   * Closes the listening sockets of every thread (the start of a drain): once this resolves, new
   * connections are refused whichever thread the kernel would have given them to.
   */
  async stopAcceptingAll(): Promise<void> {
    this.stopAccepting();
    await this.workers?.stopAccepting();
  }

  /** Closes this thread's listening sockets. */
  stopAccepting(): void {
    this.server?.stopAccepting();
  }

  /**
   * Requests in flight in every thread: the worker threads are asked for a report first, so the
   * figure is current; a worker that has not answered within `maxWaitMs` counts as it last
   * reported (a shutdown must not wait on a busy thread).
   */
  async inFlightNow(maxWaitMs = 200): Promise<number> {
    const workers = this.workers;
    if (workers !== null) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, maxWaitMs)));
      await Promise.race([workers.report(), late]);
      clearTimeout(timer);
    }
    return this.stats.inFlightAll;
  }

  /**
   * Graceful stop: refuse new connections, let in-flight requests finish for up to `timeoutMs`,
   * then end what is left and close everything. Resolves to the number of requests ended at the
   * deadline (0: everything finished in time).
   */
  async drain(timeoutMs: number): Promise<number> {
    const cut = await this.drainRequests(timeoutMs);
    await this.close();
    return cut;
  }

  /**
   * The first half of `drain`: stops taking connections and job items and lets the requests in
   * flight finish (up to `timeoutMs`, in every thread); closes nothing else.
   */
  async drainRequests(timeoutMs: number): Promise<number> {
    this.watcher?.close();
    this.watcher = null;
    // Job items are requests too: stop taking new ones so the drain can reach zero.
    await this.batch?.worker.stop();
    const workers = this.workers;
    this.workers = null;
    const [cut, cutByWorkers] = await Promise.all([
      this.server ? this.server.drain(timeoutMs) : 0,
      workers === null ? 0 : workers.stop(timeoutMs),
    ]);
    return cut + cutByWorkers;
  }

  /** Closes every socket and timer right away. */
  async close(): Promise<void> {
    this.watcher?.close();
    this.watcher = null;
    const workers = this.workers;
    this.workers = null;
    // Stopped, not terminated: a worker ends its own listeners before its thread ends.
    await workers?.stop(0);
    // Whatever the stopped workers' requests still held in this thread's admission is theirs no
    // more (a queued one would otherwise keep its controller's timer until it expired).
    this.remoteAdmissions.workerDied(-1);
    if (this.healthTimer !== null) clearInterval(this.healthTimer);
    this.healthTimer = null;
    this.capacity?.close();
    this.capacity = null;
    this.overload?.close();
    this.overload = null;
    await this.batch?.close();
    this.batch = null;
    this.server?.closeNow();
    await this.admin?.close();
    this.admin = null;
    await this.runtime.close();
    if (this.plan !== undefined) for (const i of this.plan.pluginInstances) await i.close();
    await this.plugins.close();
    await this.registry.destroyAll();
    this.stats.series.close();
    this.eventLoop?.close();
    this.eventLoop = null;
    this.stats.tracer = null;
    await this.exporter?.close();
    this.exporter = null;
    const log = this.stats.accessLog;
    this.stats.accessLog = null;
    await log?.close();
    await this.sim?.close();
    this.sim = null;
  }
}

/** How often a worker thread reports its metrics to the main thread, ms (reads also ask at once). */
const WORKER_REPORT_MS = 1000;

/** Shortest wait between the two reads of a watched file that must agree before it is applied, ms. */
const SETTLE_FLOOR_MS = 20;
/** Reads of a watched file that keeps changing before the reload gives up (the next change retries). */
const SETTLE_ROUNDS = 20;

/**
 * Reads `file` until two reads `settleMs` apart give the same text, and returns it: a file still
 * being written (an editor writing in place, `cat > file`) is not taken half-written. A writer that
 * pauses for longer than `settleMs` cannot be told from one that finished; editors and Kubernetes
 * replace files atomically (rename), which never shows a partial file.
 */
async function readSettled(file: string, settleMs: number): Promise<string> {
  let text = await readIfThere(file);
  for (let round = 0; round < SETTLE_ROUNDS; round++) {
    await new Promise((r) => setTimeout(r, settleMs));
    const again = await readIfThere(file);
    if (again !== null && again === text) return again;
    text = again;
  }
  if (text === null) return readFile(file, 'utf8');
  throw new Error(`the file kept changing for ${SETTLE_ROUNDS * settleMs} ms`);
}

/** The text of `file`, or null while it does not exist (an editor between its rename and write). */
async function readIfThere(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** Loads `options.configPath` and starts Sluice; rejects with ConfigInvalidError on a bad file. */
export async function startSluice(options: SluiceOptions): Promise<Sluice> {
  const loaded = await loadConfigFile(options.configPath);
  if (!loaded.ok) throw new ConfigInvalidError(loaded.errors.map(formatConfigError));
  const count = resolveThreads(loaded.config, options.cores ?? (await availableCores()));
  const shared = new SharedTable({ shared: count.threads > 1 });
  const sluice = new Sluice(options.configPath, options.logger ?? createLogger('info'), shared);
  await sluice.start(loaded.config, loaded.digest, options.watch ?? true, loaded.plugins ?? [], count);
  return sluice;
}

/** A learned ms-per-token rate for the admin API: 4 significant digits, null while unprobed. */
function learnedRate(v: number): number | null {
  return v < 0 ? null : Number(v.toPrecision(4));
}
