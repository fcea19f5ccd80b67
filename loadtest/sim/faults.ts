/**
 * Fault injection for a simulated node: the node-wide fault state set through `/control/faults` or
 * `SimNode.setFaults`, the per-request `x-sim-*` header overrides, and the decision for one request
 * combining both. Carrying faults out (stalling, dropping, crashing) is the node's job.
 */

import type { IncomingHttpHeaders } from 'node:http';
import type { SeededRandom } from './prng.js';

/** Node-wide fault settings. JSON keys are these names, snake_case. */
export interface SimFaults {
  /** Share of inference requests answered with `error_status`, 0..1. Default 0. */
  error_rate: number;
  /** Status of injected errors (400..599), with an OpenAI error body. Default 500. */
  error_status: number;
  /** Delay before an inference response's head, real ms (not scaled). Default 0. */
  stall_ms: number;
  /** Share of inference requests whose connection is destroyed, 0..1. Default 0. */
  drop_rate: number;
  /** Streams picked by `drop_rate` are cut after this many data chunks; plain responses before the head. Default 0. */
  drop_after_chunks: number;
  /** Multiplies every modelled time (a thermally throttled or shared GPU). Default 1. */
  slowdown: number;
  /** true: the node is down — open connections are destroyed, new requests are reset (except /control). */
  crash: boolean;
  /** true: `/health` answers 503 while requests are still served (e.g. draining). Default false. */
  unhealthy: boolean;
  /** Length of the warm-up after recovering from a crash, real ms; 0 = none. Setting it starts a warm-up now. */
  slow_start_ms: number;
  /** Time multiplier at the start of a warm-up, decaying linearly to 1. Default 4. */
  slow_start_factor: number;
}

/** Faults of a healthy node. */
export const NO_FAULTS: Readonly<SimFaults> = Object.freeze({
  error_rate: 0,
  error_status: 500,
  stall_ms: 0,
  drop_rate: 0,
  drop_after_chunks: 0,
  slowdown: 1,
  crash: false,
  unhealthy: false,
  slow_start_ms: 0,
  slow_start_factor: 4,
});

type Rule =
  { kind: 'boolean' } | { kind: 'number'; min: number; max: number; integer?: boolean; above?: boolean };

const RULES: Record<keyof SimFaults, Rule> = {
  error_rate: { kind: 'number', min: 0, max: 1 },
  error_status: { kind: 'number', min: 400, max: 599, integer: true },
  stall_ms: { kind: 'number', min: 0, max: 3_600_000 },
  drop_rate: { kind: 'number', min: 0, max: 1 },
  drop_after_chunks: { kind: 'number', min: 0, max: 1_000_000, integer: true },
  slowdown: { kind: 'number', min: 0, max: 1_000_000, above: true },
  crash: { kind: 'boolean' },
  unhealthy: { kind: 'boolean' },
  slow_start_ms: { kind: 'number', min: 0, max: 3_600_000 },
  slow_start_factor: { kind: 'number', min: 1, max: 1_000_000 },
};

/** A fault update that failed validation; `message` names the key. */
export class FaultPatchError extends Error {
  override readonly name = 'FaultPatchError';
}

/**
 * Checks a partial fault update (parsed JSON or an object from code). Returns it typed; throws
 * `FaultPatchError` for a non-object, an unknown key, or a value of the wrong type or range.
 */
export function validateFaultPatch(input: unknown): Partial<SimFaults> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new FaultPatchError('fault update must be a JSON object');
  }
  for (const [key, value] of Object.entries(input)) {
    const rule = (RULES as Record<string, Rule | undefined>)[key];
    if (rule === undefined) {
      throw new FaultPatchError(`unknown fault "${key}" (known: ${Object.keys(RULES).join(', ')})`);
    }
    if (rule.kind === 'boolean') {
      if (typeof value !== 'boolean') throw new FaultPatchError(`fault "${key}" must be true or false`);
      continue;
    }
    const ok =
      typeof value === 'number' &&
      Number.isFinite(value) &&
      (rule.above === true ? value > rule.min : value >= rule.min) &&
      value <= rule.max &&
      (rule.integer !== true || Number.isInteger(value));
    if (!ok) {
      const lo = rule.above === true ? `> ${rule.min}` : `>= ${rule.min}`;
      throw new FaultPatchError(
        `fault "${key}" must be ${rule.integer === true ? 'an integer' : 'a number'} ${lo} and <= ${rule.max}`,
      );
    }
  }
  return input;
}

/** Per-request overrides read from `x-sim-*` request headers; undefined = header absent. */
export interface RequestOverrides {
  /** `x-sim-status`: answer this status with an OpenAI error body. */
  status: number | undefined;
  /** `x-sim-retry-after`: Retry-After value sent with `status`. */
  retryAfter: string | undefined;
  /** `x-sim-stall-ms`: delay before the head, real ms. */
  stallMs: number | undefined;
  /** `x-sim-drop-after`: streams cut after N chunks; plain responses dropped at once. */
  dropAfter: number | undefined;
  /** `x-sim-chunk-delay-ms`: fixed real-ms gap between output tokens instead of decode steps. */
  chunkDelayMs: number | undefined;
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function intHeader(headers: IncomingHttpHeaders, name: string, min: number, max: number): number | undefined {
  const raw = header(headers, name);
  if (raw === undefined) return undefined;
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    throw new FaultPatchError(`header ${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  }
  return n;
}

/** Reads the `x-sim-*` overrides; throws `FaultPatchError` for a malformed value. */
export function readRequestOverrides(headers: IncomingHttpHeaders): RequestOverrides {
  return {
    status: intHeader(headers, 'x-sim-status', 400, 599),
    retryAfter: header(headers, 'x-sim-retry-after'),
    stallMs: intHeader(headers, 'x-sim-stall-ms', 0, 3_600_000),
    dropAfter: intHeader(headers, 'x-sim-drop-after', 0, 1_000_000),
    chunkDelayMs: intHeader(headers, 'x-sim-chunk-delay-ms', 0, 3_600_000),
  };
}

/** What to do to one inference request, decided once before it is processed. */
export interface FaultDecision {
  /** Real ms to wait before processing; 0 = none. */
  stallMs: number;
  /** Error status to answer with; 0 = serve normally. */
  errorStatus: number;
  /** Retry-After header for the error, if any. */
  retryAfter: string | undefined;
  /** Chunks before the connection is destroyed (streams); -1 = never. Plain responses drop when >= 0. */
  dropAfter: number;
  /** Fixed gap between tokens, real ms; 0 = decode-step pacing. */
  chunkDelayMs: number;
}

/** Combines node faults and header overrides; headers win. `rng` drives the rate-based faults. */
export function decideFaults(faults: SimFaults, o: RequestOverrides, rng: SeededRandom): FaultDecision {
  const errorByRate = faults.error_rate > 0 && rng.nextFloat() < faults.error_rate;
  const errorStatus = o.status ?? (errorByRate ? faults.error_status : 0);
  const dropByRate = faults.drop_rate > 0 && rng.nextFloat() < faults.drop_rate;
  const dropAfter = o.dropAfter ?? (dropByRate ? faults.drop_after_chunks : -1);
  return {
    stallMs: o.stallMs ?? faults.stall_ms,
    errorStatus,
    retryAfter: o.retryAfter,
    dropAfter: errorStatus > 0 ? -1 : dropAfter,
    chunkDelayMs: o.chunkDelayMs ?? 0,
  };
}
