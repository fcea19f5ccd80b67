/**
 * The JSON result of one run: the stable, documented shape that `--out` writes, `compare` reads and
 * later tooling can rely on. Times are milliseconds unless a key says otherwise; shares and rates are
 * fractions 0..1. Plain types only; building it is `build-result.ts`.
 */

/** Value of `format` in every result file. */
export const RESULT_FORMAT = 'sluice-loadtest-result/1';

/** Percentiles of one latency series, ms; null when nothing was recorded. */
export interface LatencySummary {
  count: number;
  mean_ms: number | null;
  p50_ms: number | null;
  p90_ms: number | null;
  p99_ms: number | null;
  p999_ms: number | null;
  max_ms: number | null;
}

/** Counts and tail latency of one tenant or request kind. */
export interface GroupResult {
  name: string;
  requests: number;
  /** Share of all requests of the run, 0..1. */
  share: number;
  ok: number;
  errors: number;
  e2e_p50_ms: number | null;
  e2e_p99_ms: number | null;
  ttft_p50_ms: number | null;
  ttft_p99_ms: number | null;
}

/** What one simulated node did during the measured phase (counter differences). */
export interface NodeResult {
  index: number;
  url: string;
  speed_factor: number;
  /** Inference responses with 200. */
  served: number;
  /** Share of all nodes' served responses, 0..1. */
  share: number;
  /** Mean occupied sequence slots. */
  busy_slots_avg: number;
  /** Busy share of the slots (the simulated GPU utilisation), 0..1; null when the slot count is unknown. */
  utilisation: number | null;
  cache_query_tokens: number;
  cache_hit_tokens: number;
  /** hit / query tokens, 0..1; null without lookups. */
  cache_hit_rate: number | null;
  /** Output tokens produced. */
  generation_tokens: number;
}

/** One second of the measured phase, by intended send time. */
export interface TimelinePoint {
  t_s: number;
  requests: number;
  ok: number;
  errors: number;
  e2e_p50_ms: number | null;
  e2e_p99_ms: number | null;
}

/** The result file. */
export interface LoadtestResult {
  format: typeof RESULT_FORMAT;
  scenario: string;
  variant: string;
  description: string;
  file: string;
  /** ISO 8601 start time of the measured phase. */
  started_at: string;
  seed: number;
  load: {
    mode: 'open' | 'closed';
    /** How traffic was driven: `open-loop`, `closed-loop` (own SSE client) or `autocannon`. */
    driver: 'open-loop' | 'closed-loop' | 'autocannon';
    /** Open loop: offered arrivals per second. */
    rate_per_s: number | null;
    arrivals: 'uniform' | 'poisson';
    connections: number | null;
    max_in_flight: number | null;
  };
  target: {
    /** `sluice` (a Sluice child in front of the fleet), `direct` (straight to the nodes) or `external`. */
    kind: 'sluice' | 'direct' | 'external';
    urls: string[];
    /** CPU time of the Sluice process during the measured phase, ms; null without one or off Linux. */
    sluice_cpu_ms: number | null;
    /** That CPU time per request, µs. */
    sluice_cpu_us_per_request: number | null;
  };
  fleet: { nodes: number; profile: string; speed_factors: number[]; process: 'in-process' | 'child' } | null;
  /** Sending phase, s (the scenario's duration unless stopped early). */
  duration_s: number;
  /** Sending phase plus the drain, s. */
  wall_s: number;
  requests: {
    /** Planned requests, sent or refused by the client's in-flight cap. */
    total: number;
    ok: number;
    errors: number;
    /** total / duration_s. */
    offered_per_s: number;
    /** Successes completed while sending went on, per second of it: the throughput (drain completions excluded). */
    ok_per_s: number;
    /**
     * Streamed output tokens received while sending went on, per second of it (tokens of the drain
     * excluded, as for ok_per_s).
     */
    stream_tokens_per_s: number;
  };
  latency_ms: {
    /** Intended send to last byte, successful requests. */
    e2e: LatencySummary;
    /** Intended send to first token, successful streams. */
    ttft: LatencySummary;
    /** Gaps between consecutive tokens of streams that completed successfully. */
    itl: LatencySummary;
    /** Open loop: how late the generator sent requests. */
    send_lag: LatencySummary;
    /** Intended send to the answer, for requests answered with an error status, 4xx or 5xx (rejections). */
    error_e2e?: LatencySummary;
  };
  /** Responses by HTTP status. */
  statuses: Record<string, number>;
  /** Failures by category (`http_503`, `ECONNREFUSED`, `timeout`, `client_overflow`, `unfinished`, `stream_error`, ...). */
  errors: Record<string, number>;
  tenants: GroupResult[];
  kinds: GroupResult[];
  nodes: NodeResult[];
  prefix_cache: { query_tokens: number; hit_tokens: number; hit_rate: number | null };
  /** Chat sessions started, and turns that found every session busy, in the measured phase (not the warm-up). */
  sessions: { started: number; overflows: number };
  generator: { peak_in_flight: number };
  timeline: TimelinePoint[];
  /** HdrHistograms (µs, compressed base64 V2 encoding) of e2e and TTFT, for re-analysis. */
  histograms: { e2e: string; ttft: string };
  /** Why sending stopped before the scenario's limits (`interrupted`, `target refused connections`), or null. */
  stopped_early: string | null;
  /**
   * The Sluice child's `sluice_plugin_*` counters over the measured phase (after minus before), by
   * series (`name{labels}`); absent without a Sluice child or when it exports none.
   */
  plugin_metrics?: Record<string, number>;
}
