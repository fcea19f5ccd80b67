/**
 * The shape of a validated Sluice config file, after defaults are applied. The loader
 * (`config/loader.ts`) produces it; `proxy/plan/compile-plan.ts` turns it into the immutable runtime
 * plan. Nothing on the request path reads these objects directly. YAML keys are snake_case.
 */

/** A listener that takes client (downstream) traffic. */
export interface ListenerConfig {
  /** Unique name, used in logs and metrics labels. */
  name: string;
  /** Bind address. Default `0.0.0.0`. */
  address: string;
  /** TCP port; 0 picks a free port (tests). */
  port: number;
  /** Largest request body accepted; larger bodies get 413. Default 10 MiB. */
  max_body_bytes: number;
  /** Largest request head (request line + headers); larger get 431. Default 16 KiB. */
  max_header_bytes: number;
  /** Plugin instances applied to every route of this listener, before the route's own. */
  plugins?: string[];
  /** Most header fields in a request head; more get 431. Default 100. */
  max_header_count: number;
  /** Longest request target (path and query), bytes; longer get 414. Default 8192. */
  max_url_bytes: number;
  /**
   * 0: the uWebSockets.js engine (pipelined requests close the connection). N > 0: Sluice's own
   * HTTP/1.1 engine, serving pipelined requests in order with at most N unanswered per connection.
   * Default 0.
   */
  pipelining: number;
  /**
   * Keep the client's X-Forwarded-Host, X-Forwarded-Proto and Forwarded (a load balancer in front
   * of Sluice sets them) instead of writing Sluice's own. Default false.
   */
  trust_forwarded: boolean;
  /** Time allowed for a complete request head, ms (own engine; uWS has a fixed ~10 s). Default 10000. */
  header_timeout_ms: number;
  /** Time allowed for a complete request body after its head, ms. Default 60000. */
  body_timeout_ms: number;
  /** Longest wait for a client that takes no response bytes before the request is aborted, ms. Default 30000. */
  write_timeout_ms: number;
  /** Response bytes held per connection for a slow client before the node's stream pauses. Default 65536. */
  write_buffer_bytes: number;
  /** Most connections held at once; more are closed when accepted. 0: no limit. Default 0. */
  max_connections: number;
  /** Serve HTTPS (HTTP/1.1 over TLS) with this certificate; absent: plain HTTP. */
  tls?: ListenerTlsConfig;
}

/** A TLS listener's certificate and key (PEM files; relative paths from the config file's directory). */
export interface ListenerTlsConfig {
  /** Certificate chain, leaf first. Re-read on every reload; a new certificate is swapped in. */
  cert_file: string;
  /** Unencrypted private key of the leaf certificate. */
  key_file: string;
}

/** The admin listener: health, readiness, metrics, stats, status page, drain, config and reload. */
export interface AdminConfig {
  /** Default `127.0.0.1`: the admin API is not for the public network. */
  address: string;
  /** Default 9901. */
  port: number;
  /** Bearer token for everything but `/healthz`, by environment variable or SHA-256 digest. Absent: none. */
  token?: { env: string } | { sha256: string };
}

/** Sliding windows of the histograms (restart to change). */
export interface MetricsConfig {
  /** Slices in the window. Default 6. */
  window_slices: number;
  /** Length of one slice, ms. Default 10000. */
  window_slice_ms: number;
}

/** The structured access log (restart to change). */
export interface AccessLogConfig {
  /** Default true when the section is present. */
  enabled: boolean;
  /** `stdout`, `stderr` or a file path (relative to the config file). Default stdout. */
  destination: string;
  /** Lowest level written (2xx/3xx info, 4xx warn, 5xx error). Default info. */
  level: 'debug' | 'info' | 'warn' | 'error';
  /** Share of info lines written, 0..1. Default 1. */
  sample_rate: number;
}

/** OpenTelemetry export over OTLP/HTTP JSON (restart to change). */
export interface TracingConfig {
  /** Collector traces URL (`http://otel-collector:4318/v1/traces`). */
  endpoint: string;
  /** Default `sluice`. */
  service_name: string;
  /** Share of untraced requests that start a trace, 0..1. Default 1. */
  sample_ratio: number;
  /** Default 1000 ms. */
  flush_interval_ms: number;
  /** Default 512. */
  max_batch_spans: number;
  /** Default 8192. */
  max_queue_spans: number;
  /** Default 5000 ms. */
  timeout_ms: number;
}

/** Upstream timeouts in milliseconds; 0 disables one. */
export interface TimeoutsConfig {
  /** TCP connect to a node. Default 2000. */
  connect_ms: number;
  /** From dispatch to the response head. Default 60000. */
  ttfb_ms: number;
  /** Longest gap between two body chunks from the node. Default 30000. */
  idle_ms: number;
  /** Whole exchange, head and body. Default 600000. */
  total_ms: number;
}

export interface NodeConfig {
  /** Base URL of the node, `http://host:port` (no path). */
  url: string;
  /** Relative share of traffic. Default 1. 0 takes the node out of rotation. */
  weight: number;
}

/** Where a pool's affinity key comes from (consistent-hash). */
export type AffinityConfig =
  | { source: 'header'; name: string }
  | { source: 'body_field'; field: string }
  | { source: 'tenant' }
  | { source: 'prefix'; chars: number };

export interface BalanceConfig {
  /** Policy kind, kebab-case. Default `round-robin`. */
  kind: 'round-robin' | 'least-request' | 'least-response-time' | 'consistent-hash' | 'cache-aware';
  /** consistent-hash: a node above (1 + epsilon) × mean load is skipped. Default 0.25. */
  epsilon?: number;
  /** consistent-hash: in-flight tokens under which a node keeps its keys. Default 16384. */
  spill_floor_tokens?: number;
  /** consistent-hash: ring points per unit of weight. Default 100. */
  points_per_weight?: number;
  /** least-response-time, cache-aware: half-life of the learned prefill rates' samples, ms. Default 10000. */
  decay_ms?: number;
  /** cache-aware, least-response-time: KV-cache capacity assumed per node, tokens. Default 400000. */
  cache_tokens?: number;
  /** least-response-time, cache-aware: weight of a token queued ahead against one of the request's own. Default 4 (least-response-time), 1 (cache-aware). */
  queue_weight?: number;
  /** cache-aware: weight of the delay a request's prefill adds to the requests running on a node. Default 0 (off). */
  stall_weight?: number;
  /** cache-aware: bound of the pool's prefix indexes together, MiB. Default 64. */
  index_max_mb?: number;
  /** consistent-hash, cache-aware: where the key comes from. Without it, no affinity (cache-aware: no home node). */
  affinity?: AffinityConfig;
}

/** Active health checks of a pool's nodes. */
export interface ActiveCheckConfig {
  path: string;
  interval_ms: number;
  timeout_ms: number;
  healthy_threshold: number;
  unhealthy_threshold: number;
}

/** Passive outlier ejection from real traffic. */
export interface OutlierConfig {
  consecutive_failures: number;
  base_ejection_ms: number;
  max_ejection_ms: number;
  max_ejection_percent: number;
}

/** Scraping the nodes' own Prometheus metrics (vLLM names) as a load and saturation signal. */
export interface ScrapeConfig {
  interval_ms: number;
  /** Saturated when `vllm:num_requests_waiting` reaches this; 0 = not used. */
  max_waiting: number;
  /** Saturated when `vllm:gpu_cache_usage_perc` reaches this (0..1); 0 = not used. */
  max_kv_usage: number;
}

export interface HealthConfig {
  /** Absent: no active checks. */
  active?: ActiveCheckConfig;
  outlier: OutlierConfig;
  /** Ramp of a returning node's weight, ms; 0 disables. Default 30000. */
  slow_start_ms: number;
  /** Absent: no scraping. */
  scrape?: ScrapeConfig;
}

/** Envoy/Finagle-style retry budget: retries may add at most `percent` % of the pool's requests. */
export interface RetryBudgetConfig {
  percent: number;
  /** Retries always allowed per second regardless of traffic. */
  min_per_second: number;
}

/** Hedged requests: a second attempt elsewhere when the first has no first token (or, not streamed, no head) in time. */
export interface HedgeConfig {
  /** The delay is this percentile of the pool's recent times to first token (streams) or head times. Default 95. */
  percentile: number;
  /** Floor of the delay, ms. Default 50. */
  min_delay_ms: number;
  /** Hedges may add at most this % of the pool's requests. Default 5. */
  budget_percent: number;
  /** TTFB samples needed before hedging starts. Default 20. */
  min_samples: number;
}

export interface PoolConfig {
  name: string;
  nodes: NodeConfig[];
  balance: BalanceConfig;
  /**
   * Most connections per node, which also caps its requests in flight. Absent: the circuit
   * breaker's limit, or no cap (see `nodeConnections` in plan.ts).
   */
  connections_per_node?: number;
  /** The HTTP client for the pool's `http:` nodes: Sluice's own (default) or undici's. */
  upstream_client?: 'sluice' | 'undici';
  /** Circuit breaker: most concurrent attempts per node; 0 = no limit. Default 0. */
  max_in_flight_per_node: number;
  /** Headers set on every request to the nodes (`${env:NAME}` resolved at load). Absent: none. */
  request_headers?: Record<string, string>;
  timeouts: TimeoutsConfig;
  health: HealthConfig;
  retry_budget: RetryBudgetConfig;
  /** Absent: no hedging. */
  hedge?: HedgeConfig;
  /** Absent: no queueing (an overloaded pool answers 503 at once). */
  admission?: AdmissionConfig;
  /** Absent: capacity estimation with the defaults (see docs/capacity.md). */
  capacity?: CapacityConfig;
}

/** How a pool's recommended node count is estimated (`sluice_pool_recommended_nodes`). */
export interface CapacityConfig {
  /** Share of each node's capacity to plan for, in (0, 1]. Default 0.7. */
  target_utilisation: number; // ratio
  /** Sliding window of the observed load and times, ms. Default 60000. */
  window_ms: number; // ms
}

/** Conditions a request must meet; all given conditions must hold. */
export interface RouteMatchConfig {
  /** Exact path (without query). */
  path?: string;
  /** Path prefix. */
  path_prefix?: string;
  /** Upper-case methods; any when absent. */
  methods?: string[];
  /** Host header value without port, case-insensitive. */
  host?: string;
  /** Header name (lower-case) → exact value. */
  headers?: Record<string, string>;
  /** The JSON body's `model` field must equal one of these. */
  models?: string[];
}

/** Failures a route may retry on (always before any response byte went to the client). */
export type RetryOn = 'connect-failure' | 'reset' | 'timeout' | '5xx' | '429';

export interface RetryConfig {
  /** Extra attempts after the first. Default 1. */
  max: number;
  /** Full-jitter exponential backoff: delay drawn from [0, min(max, base × 2^(n-1))], ms. */
  base_backoff_ms: number;
  max_backoff_ms: number;
  /** Default: connect-failure, reset, 5xx. */
  on: RetryOn[];
  /** An upstream Retry-After is honoured up to this, ms. Default 2000. */
  max_retry_after_ms: number;
}

export interface SplitEntry {
  pool: string;
  weight: number;
}

export interface MirrorConfig {
  /** Pool that receives the copies; its answers are measured and discarded. */
  pool: string;
  /** Share of the route's requests copied, 0–100. */
  percent: number;
}

/** Micro-batching of a route's requests. */
export interface BatchingConfig {
  mode: 'native' | 'fanout';
  upstream_path?: string;
  max_batch_size: number;
  max_wait_ms: number;
  target_latency_ms: number;
  max_concurrent_per_node: number;
  max_attempts: number;
  dedup: boolean;
}

export interface RouteConfig {
  name: string;
  match: RouteMatchConfig;
  /** Name of the pool that serves the route (or `split`). */
  pool?: string;
  /** Weighted split across pools (canary: 95/5), instead of `pool`. */
  split?: SplitEntry[];
  /** A request whose header of this name names one of the split's pools goes to that pool. */
  pin_header?: string;
  /** Version affinity: requests with the same value of this header stay on the pool they started on. */
  sticky_header?: string;
  /** Pools tried in order when the chosen pool has no eligible node. */
  fallback: string[];
  mirror?: MirrorConfig;
  retries: RetryConfig;
  /** Add `x-sluice-route` (policy, pool, node, attempt, affinity) to responses. Default false. */
  route_header: boolean;
  /** With tenants configured: serve requests without a key as `anonymous_tenant`. Default false. */
  allow_anonymous: boolean;
  /** Absent: each request is its own upstream call. */
  batching?: BatchingConfig;
  /** Plugin instances the route runs, in order (after its listener's). */
  plugins?: string[];
  /**
   * Per-route override of the pool's timeouts (fields merged over the pool's). `connect_ms` is a
   * pool setting only: connections belong to the pool's nodes.
   */
  timeouts?: Partial<Omit<TimeoutsConfig, 'connect_ms'>>;
}

/** Simulated GPU nodes started inside the Sluice process (the embedded default). */
export interface SimulatorConfig {
  /** How many nodes. */
  nodes: number;
  /** Bind address. Default 127.0.0.1. */
  address: string;
  /** Port of the first node; the others take the following ports. */
  port: number;
  /** Profile name from `loadtest/profiles/` or a path. Default `llama-8b-h100-bf16`. */
  profile: string;
}

export interface ServerConfig {
  /** On SIGTERM, how long in-flight requests may run before the process exits. Default 30000. */
  drain_timeout_ms: number;
  /** Debounce for the config file watcher. Default 100. */
  reload_debounce_ms: number;
  /**
   * Threads serving the listeners on the same ports (1: the main thread only); `auto`: one per core
   * this process may use, or 1 where the config holds a per-thread feature (`thread-count.ts`).
   * Default `auto`.
   */
  workers: number | 'auto';
  /** Shedding new requests while Sluice itself is overloaded. */
  overload: OverloadConfig;
}

/** Overload protection of the process: thresholds past which new requests get 503 + Retry-After. */
export interface OverloadConfig {
  /** Event-loop delay (p99 over a sample), ms; 0 turns this signal off. Default 1000. */
  event_loop_delay_ms: number;
  /** V8 heap used, percent of its limit; 0 turns this signal off. Default 90. */
  heap_used_percent: number;
  /** How often the signals are sampled, ms. Default 500. */
  sample_interval_ms: number;
  /** Shedding stops once every signal is below this share of its threshold. Default 0.8. */
  recover_ratio: number;
  /** Shortest shedding episode, ms (hysteresis). Default 2000. */
  min_shed_ms: number;
  /** Retry-After of a shed request, ms. Default 1000. */
  retry_after_ms: number;
}

/** Limits of one scope; an absent field is no limit. */
export interface LimitsConfig {
  requests_per_minute?: number;
  tokens_per_minute?: number;
  /** Requests in flight at once, per Sluice instance. */
  max_concurrent?: number;
}

export interface TenantLimitsConfig extends LimitsConfig {
  /** Extra limits for requests to one model (the JSON body's `model`). */
  models?: Record<string, LimitsConfig>;
}

/** A tenant: who may call, how urgent its requests are, its fair share, its limits. */
export interface TenantConfig {
  name: string;
  /** API keys, by environment variable or SHA-256 digest; never in plain text. */
  keys: ({ env: string } | { sha256: string })[];
  /** Admission class: higher is dequeued first and shed last. Default 0. */
  priority: number;
  /** Fair share inside its class. Default 1. */
  weight: number;
  limits?: TenantLimitsConfig;
}

export interface RedisLimitsConfig {
  url: string;
  key_prefix: string;
  fail_mode: 'open' | 'closed';
  timeout_ms: number;
  connect_timeout_ms: number;
  reconnect_max_delay_ms: number;
  time: 'server' | 'client';
}

export interface RateLimitsConfig {
  /** `memory` (one process, exact) or `redis` (shared by instances). Default memory. */
  store: 'memory' | 'redis';
  redis?: RedisLimitsConfig;
  /** Limits of every tenant without its own. */
  defaults?: TenantLimitsConfig;
  /** Completion budget assumed when a request sets no max_tokens. Default 1024. */
  default_max_tokens: number;
  max_retry_after_ms: number;
}

/** Admission control of a pool: bounded queue, deadlines, priorities, fair sharing. */
export interface AdmissionConfig {
  max_in_flight_per_node: number;
  max_queue: number;
  max_wait_ms: number;
  /** Deadline of requests without `x-request-deadline-ms`; 0 = none. */
  default_deadline_ms: number;
  max_deadline_ms: number;
  /** What a tenant's fair share counts. */
  fairness: 'requests' | 'tokens';
  /** Slots per node only tenants under their fair share may take (0 = off). */
  reserve_per_node: number;
  /** How long a tenant counts as active after its last request, ms. */
  reserve_window_ms: number;
  adaptive?: {
    min_limit: number;
    max_limit?: number;
    tolerance: number;
    smoothing: number;
    short_window: number;
    long_window: number;
  };
}

/** Where durable batch jobs live. */
export interface JobsConfig {
  /** `sqlite` (one file, the embedded default; processes on one host may share it) or `redis` (instances share one queue). */
  store: 'sqlite' | 'redis';
  /** SQLite file; relative paths resolve against the config file's directory. Default `sluice-jobs.db`. */
  path: string;
  /** SQLite commit durability: `full` survives power loss, `normal` survives a process crash. Default full. */
  durability: 'full' | 'normal';
  redis?: { url: string; key_prefix: string };
  /** Items executing at once in this instance. Default 8. */
  concurrency: number;
  /** Most item starts per second in this instance; 0 = no limit. Default 0. */
  rate_per_second: number;
  /** Admission class of job items; absent: one below the lowest tenant priority (or -1). */
  priority?: number;
  /** Lease on a claimed item, ms. Default 300000. */
  lease_ms: number;
  /** Claims of an item before it fails for good. Default 3. */
  max_attempts: number;
  /** Backoff before a retry, doubled per attempt, ms. Default 1000. */
  retry_base_ms: number;
  /** How often an idle worker looks for work, ms. Default 500. */
  poll_ms: number;
  /** Accepted `completion_window` values. Default ['24h']. */
  completion_windows: string[];
  /** Most requests in one input file. Default 50000. */
  max_file_lines: number;
}

/** The batch endpoints Sluice answers itself: `/v1/batch`, `/v1/files`, `/v1/batches`. */
export interface BatchApiConfig {
  /** Endpoints an item may target. Default chat completions, completions, embeddings. */
  endpoints: string[];
  /** Serve callers without a key as `anonymous_tenant` (tenants configured). Default false. */
  allow_anonymous: boolean;
  sync: {
    /** Most items in one `POST /v1/batch`. Default 1000. */
    max_items: number;
    /** Items of one `POST /v1/batch` in flight at once. Default 64. */
    concurrency: number;
  };
  jobs: JobsConfig;
  idempotency: {
    /** How long a completed `Idempotency-Key` replays, ms. Default 86400000. */
    ttl_ms: number;
    /** How long a key whose request never completed blocks retries, ms. Default 600000. */
    in_progress_ttl_ms: number;
  };
}

/** One plugin instance (`plugins[]`). */
export interface PluginInstanceConfig {
  /** Unique instance name; routes and listeners list it. */
  name: string;
  /** A first-party plugin's name, or a module path relative to the config file. Default: `name`. */
  use?: string;
  /** The plugin's options, validated against its own schema. Default {}. */
  options: Record<string, unknown>;
  /** Longest an async hook may take before it counts as failed, ms. Default 1000. */
  timeout_ms: number;
  /** Longest `create` may take before the config is refused, ms. Default 10000. */
  create_timeout_ms: number;
  /** Skip a failing hook instead of failing the request. Default false. */
  fail_open: boolean;
}

/** Where plugins' key-value stores live. */
export interface PluginStoreConfig {
  /** `memory` (this process) or `redis` (shared). Default memory. */
  store: 'memory' | 'redis';
  /** memory: most keys held, over all instances. Default 100000. */
  max_entries: number;
  redis?: {
    url: string;
    key_prefix: string;
    timeout_ms: number;
    connect_timeout_ms: number;
    reconnect_max_delay_ms: number;
  };
}

export interface SluiceConfig {
  listeners: ListenerConfig[];
  admin: AdminConfig;
  server: ServerConfig;
  metrics: MetricsConfig;
  /** Absent: no access log. */
  access_log?: AccessLogConfig;
  /** Absent: no tracing. */
  tracing?: TracingConfig;
  pools: PoolConfig[];
  routes: RouteConfig[];
  simulator?: SimulatorConfig;
  /** Absent: no authentication, no limits (every request is anonymous). */
  tenants?: TenantConfig[];
  /** Tenant of requests that present no key, on routes that allow it. */
  anonymous_tenant?: string;
  rate_limits: RateLimitsConfig;
  /** Absent: the batch endpoints are off (they get 404 like any unrouted path). */
  batch_api?: BatchApiConfig;
  /** Plugin instances. Default none. */
  plugins: PluginInstanceConfig[];
  plugin_store: PluginStoreConfig;
}
