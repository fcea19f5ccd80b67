/**
 * The proxy benchmark's knobs, read from the environment once at start (`RUNS=1 DUR=3 npm run
 * bench`). Pure: the caller passes the environment, so tests can build settings without touching
 * `process.env`.
 */

/** Everything a benchmark run is told from outside. Durations in seconds. */
export interface BenchSettings {
  /** Measured rounds over every target; the report takes medians over them. */
  runs: number;
  /** Length of one measured wrk run, s. */
  durS: number;
  /** Unrecorded wrk run just before each measured one, s. */
  warmS: number;
  /** Unrecorded wrk run per target once before round 1 (JIT warm-up), s. */
  prewarmS: number;
  /** Client connections for the fast and streamed-at-once cases. */
  conns: number;
  /** Client connections for the slow-node case. */
  slowConns: number;
  /** Client connections for the paced-stream case. */
  pacedConns: number;
  /** How long the slow node waits before answering, ms. */
  slowDelayMs: number;
  /** Gap between two SSE writes of a paced stream, ms. */
  paceMs: number;
  /** Target names to run, in catalogue order; null = all. */
  targets: ReadonlySet<string> | null;
  /** Extra Sluice configurations, each an overlay on the minimal one (file paths). */
  extraConfigs: readonly string[];
  /** CPU list the proxies under test are pinned to (taskset syntax). */
  proxyCpus: string;
  /** CPU list of the load generator, the stand-in nodes and this process. */
  loadCpus: string;
}

/** Defaults: three rounds of 10 s, as the figures in docs/benchmarks.md were taken. */
export const DEFAULT_SETTINGS: BenchSettings = {
  runs: 3,
  durS: 10,
  warmS: 3,
  prewarmS: 5,
  conns: 50,
  slowConns: 200,
  pacedConns: 200,
  slowDelayMs: 20,
  paceMs: 5,
  targets: null,
  extraConfigs: [],
  proxyCpus: '1',
  loadCpus: '0',
};

/** `QUICK=1`: one short round, for a smoke run (figures not worth recording). */
export const QUICK_SETTINGS: Partial<BenchSettings> = { runs: 1, durS: 2, warmS: 1, prewarmS: 1 };

/** A knob that is set but not usable. */
export class BenchSettingsError extends Error {
  override readonly name = 'BenchSettingsError';
}

type Env = Readonly<Record<string, string | undefined>>;

function positive(env: Env, name: string, fallback: number, integer: boolean): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v))) {
    throw new BenchSettingsError(`${name}=${raw}: expected a ${integer ? 'whole ' : ''}number above 0`);
  }
  return v;
}

function words(raw: string | undefined): string[] {
  return (raw ?? '').split(/[\s,]+/).filter((w) => w !== '');
}

const CPU_LIST = /^\d+([-,]\d+)*$/;

function cpuList(env: Env, name: string, fallback: string): string {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  if (!CPU_LIST.test(raw))
    throw new BenchSettingsError(`${name}=${raw}: expected a CPU list such as 1 or 0-1`);
  return raw;
}

/**
 * Reads the knobs: `RUNS`, `DUR`, `WARM`, `PREWARM` (s), `CONNS`, `SLOW_CONNS`, `PACED_CONNS`,
 * `SLOW_DELAY_MS`, `PACE_MS`, `TARGETS` (names, space or comma separated), `EXTRA_SLUICE_CONFIGS`
 * (overlay files), `PROXY_CPUS`, `LOAD_CPUS`; `QUICK=1` starts from the quick settings instead of the
 * defaults (explicit knobs still win). Throws `BenchSettingsError` on a malformed value.
 */
export function readSettings(env: Env): BenchSettings {
  const base: BenchSettings =
    env['QUICK'] === '1' ? { ...DEFAULT_SETTINGS, ...QUICK_SETTINGS } : DEFAULT_SETTINGS;
  const targets = words(env['TARGETS']);
  return {
    runs: positive(env, 'RUNS', base.runs, true),
    durS: positive(env, 'DUR', base.durS, true),
    warmS: positive(env, 'WARM', base.warmS, true),
    prewarmS: positive(env, 'PREWARM', base.prewarmS, true),
    conns: positive(env, 'CONNS', base.conns, true),
    slowConns: positive(env, 'SLOW_CONNS', base.slowConns, true),
    pacedConns: positive(env, 'PACED_CONNS', base.pacedConns, true),
    slowDelayMs: positive(env, 'SLOW_DELAY_MS', base.slowDelayMs, false),
    paceMs: positive(env, 'PACE_MS', base.paceMs, false),
    targets: targets.length > 0 ? new Set(targets) : null,
    extraConfigs: words(env['EXTRA_SLUICE_CONFIGS']),
    proxyCpus: cpuList(env, 'PROXY_CPUS', base.proxyCpus),
    loadCpus: cpuList(env, 'LOAD_CPUS', base.loadCpus),
  };
}

/**
 * Upper bound of a run's wall time with these settings and `targetCount` targets, s: each target's
 * pre-warm, then per round a warm-up, the measured run and about 3 s of pauses and checks.
 */
export function estimatedSeconds(s: BenchSettings, targetCount: number): number {
  return targetCount * (s.prewarmS + s.runs * (s.warmS + s.durS + 3)) + 30;
}
