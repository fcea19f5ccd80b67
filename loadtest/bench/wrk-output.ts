/**
 * Reads what one wrk run printed: the `WRKJSON {...}` summary line that `post.lua` writes when the
 * run is done. Pure; the runner captures wrk's output and hands it here.
 */

/** One wrk run's counts and latency percentiles. */
export interface WrkSummary {
  /** Responses completed (any status). */
  requests: number;
  /** Wall time of the run, s. */
  durationS: number;
  /** Bytes read from the proxy. */
  bytes: number;
  /** Socket errors and non-2xx/3xx responses. */
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  /** Latency percentiles of the completed requests, ms. */
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
}

/** Output without a usable summary line (wrk failed to start, or the script was not loaded). */
export class WrkOutputError extends Error {
  override readonly name = 'WrkOutputError';
}

const PREFIX = 'WRKJSON ';

function num(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new WrkOutputError(`wrk summary: ${what} is not a number >= 0`);
  }
  return v;
}

/** Parses the last `WRKJSON` line of `output`. Throws `WrkOutputError` when there is none or it is malformed. */
export function parseWrkOutput(output: string): WrkSummary {
  const line = output
    .split('\n')
    .filter((l) => l.startsWith(PREFIX))
    .pop();
  if (line === undefined) {
    const tail = output.trim().split('\n').slice(-3).join(' | ');
    throw new WrkOutputError(`no WRKJSON line in wrk's output${tail === '' ? '' : `: ${tail}`}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(line.slice(PREFIX.length));
  } catch {
    throw new WrkOutputError(`malformed WRKJSON line: ${line}`);
  }
  const r = raw as {
    requests?: unknown;
    duration_us?: unknown;
    bytes?: unknown;
    errors?: Record<string, unknown>;
    latency_us?: Record<string, unknown>;
  };
  const e = r.errors ?? {};
  const l = r.latency_us ?? {};
  const ms = (k: string): number => num(l[k], `latency ${k}`) / 1000;
  const durationUs = num(r.duration_us, 'duration_us');
  if (durationUs === 0) throw new WrkOutputError('wrk summary: duration_us is 0');
  return {
    requests: num(r.requests, 'requests'),
    durationS: durationUs / 1e6,
    bytes: num(r.bytes, 'bytes'),
    errors: {
      connect: num(e['connect'], 'errors.connect'),
      read: num(e['read'], 'errors.read'),
      write: num(e['write'], 'errors.write'),
      status: num(e['status'], 'errors.status'),
      timeout: num(e['timeout'], 'errors.timeout'),
    },
    p50Ms: ms('p50'),
    p90Ms: ms('p90'),
    p99Ms: ms('p99'),
    p999Ms: ms('p999'),
    maxMs: ms('max'),
  };
}

/** Total of every kind of error in a summary. */
export function errorCount(s: WrkSummary): number {
  const e = s.errors;
  return e.connect + e.read + e.write + e.status + e.timeout;
}
