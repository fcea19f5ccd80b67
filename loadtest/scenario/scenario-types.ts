/**
 * The validated, defaults-applied form of a scenario that the runner reads: one `RunSpec` per
 * variant, everything resolved (profiles loaded, distributions parsed, tenants expanded). Parsing and
 * checking live in `scenario-loader.ts` and `scenario-checks.ts`.
 */

import type { SimProfile } from '../sim/profile.js';
import type { LengthDist } from './length-dist.js';

/** How traffic is driven. */
export interface LoadSpec {
  /** `open`: fixed arrival rate; `closed`: `connections` senders each waiting for its answer. */
  mode: 'open' | 'closed';
  /** Open loop: arrivals per second for tenants without their own rate; null when every tenant has one. */
  rate: number | null;
  /** Open loop: evenly spaced or exponential gaps. */
  arrivals: 'uniform' | 'poisson';
  /** Closed loop: concurrent connections. */
  connections: number;
  /** Open loop: most requests in flight; arrivals beyond are counted as `client_overflow`. */
  maxInFlight: number;
}

/** Simulated nodes started for the run. */
export interface FleetSpec {
  nodes: number;
  /** The profile with overrides applied, validated. */
  profile: SimProfile;
  /** Speed factor per node (length = nodes). */
  speedFactors: number[];
  /** Where the nodes run. */
  process: 'in-process' | 'child';
}

/** Where an inline Sluice config sits in the scenario file, to point errors at the right line. */
export interface ConfigOrigin {
  /** File errors are reported against. */
  file: string;
  /** Added to a config line to give the file line (0 for a separate config file). */
  lineOffset: number;
  /** Added to a config column to give the file column. */
  colOffset: number;
}

/** A Sluice child process and its config template. */
export interface SluiceSpec {
  /** Config text with `{{...}}` placeholders not yet filled in. */
  template: string;
  origin: ConfigOrigin;
  /** Listener to send traffic to; null = the first. */
  listener: string | null;
  /** Sluice processes with this config, sent to in turn (no shared state between them). */
  instances: number;
}

/** One caller. */
export interface TenantSpec {
  name: string;
  /** Sent as `Authorization: Bearer KEY`; null sends no Authorization header. */
  apiKey: string | null;
  /** Open loop: this tenant's own arrivals per second, or null to share `load.rate` by weight. */
  rate: number | null;
  /** Relative share of requests where rates do not apply. */
  weight: number;
}

/** Multi-turn chat sessions. */
export interface ChatMix {
  kind: 'chat';
  weight: number;
  /** Open loop: requests per arrival (each its own session turn), sent at the same intended time. */
  burst: number;
  stream: boolean;
  /** Tokens of each shared system prompt (0 = none). */
  systemPromptTokens: number;
  /** Distinct system prompts. */
  systemPrompts: number;
  turns: LengthDist;
  userTokens: LengthDist;
  outputTokens: LengthDist;
  /** Share of requests carrying the one hot key (0 = none) and that key. */
  hotShare: number;
  hotKey: string;
  /** Distinct prompts single-turn temperature-0 requests are drawn from (0 = off: every prompt new). */
  repeatDistinct: number;
  /** Zipf exponent of their popularity. */
  repeatZipf: number;
}

/** Single-input embedding requests. */
export interface EmbeddingMix {
  kind: 'embedding';
  weight: number;
  /** Open loop: requests per arrival, sent at the same intended time. */
  burst: number;
  inputTokens: LengthDist;
  /** Inputs per request. */
  items: number;
}

/** One entry of the workload mix. */
export type MixEntry = ChatMix | EmbeddingMix;

/** What requests look like. */
export interface WorkloadSpec {
  model: string;
  embeddingModel: string;
  /** Concurrent chat sessions kept per tenant. */
  sessions: number;
  /** Zipf exponent of session-slot popularity; 0 = uniform. */
  sessionZipf: number;
  tenants: TenantSpec[];
  mix: MixEntry[];
}

/** Everything one run of one variant needs. */
export interface RunSpec {
  scenario: string;
  /** Scenario file path as given. */
  file: string;
  description: string;
  variant: string;
  variantDescription: string;
  seed: number;
  durationS: number;
  warmupS: number;
  drainS: number;
  maxRequests: number;
  timeoutMs: number;
  load: LoadSpec;
  /** Nodes to start, or null with `target`. */
  fleet: FleetSpec | null;
  /** Sluice child in front of the fleet, or null to go direct. */
  sluice: SluiceSpec | null;
  /** An already running target, or null. */
  target: string | null;
  /** Base URLs of nodes whose /metrics are read when `target` is used. */
  nodeMetrics: string[];
  workload: WorkloadSpec;
}

/** A loaded scenario: one run per variant, in file order (one named `default` without variants). */
export interface Scenario {
  name: string;
  file: string;
  description: string;
  runs: RunSpec[];
}
