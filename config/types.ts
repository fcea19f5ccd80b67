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
}

/** The admin listener: health, readiness, metrics, config and reload. */
export interface AdminConfig {
  /** Default `127.0.0.1`: the admin API is not for the public network. */
  address: string;
  /** Default 9901. */
  port: number;
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

export interface BalanceConfig {
  /** Policy kind, kebab-case. This version ships `round-robin` (weighted). */
  kind: 'round-robin';
}

export interface PoolConfig {
  name: string;
  nodes: NodeConfig[];
  balance: BalanceConfig;
  /** Keep-alive connections per node. Default 128. */
  connections_per_node: number;
  timeouts: TimeoutsConfig;
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

export interface RouteConfig {
  name: string;
  match: RouteMatchConfig;
  /** Name of the pool that serves the route. */
  pool: string;
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
}

export interface SluiceConfig {
  listeners: ListenerConfig[];
  admin: AdminConfig;
  server: ServerConfig;
  pools: PoolConfig[];
  routes: RouteConfig[];
  simulator?: SimulatorConfig;
}
