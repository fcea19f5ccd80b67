/**
 * How many threads serve the listeners (`server.workers`): a number as written, or for `auto` one
 * per core this process may use, unless the config holds a feature whose state each thread would
 * keep for itself (`perThreadFeatures`), which keeps it at one. Startup only.
 */
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { perThreadFeatures } from '../../config/semantic-checks.js';
import type { SluiceConfig } from '../../config/types.js';

/** The most threads `auto` starts (the schema's bound for a number). */
export const MAX_THREADS = 64;

/** The threads to start and why, for the log and `/admin/config`. */
export interface ThreadCount {
  threads: number;
  /** How the count was reached: "server.workers 4", "auto: 2 cores", "auto: 1, since ...". */
  reason: string;
}

/**
 * The CPUs a cgroup CPU quota allows, rounded up, from the text of cgroup v2's `cpu.max`
 * (`"200000 100000"`: two CPUs; `"max 100000"`: no quota), or null when it sets none or does not
 * parse.
 */
export function quotaCpus(cpuMax: string): number | null {
  const [quota, period] = cpuMax.trim().split(/\s+/);
  if (quota === undefined || period === undefined || quota === 'max') return null;
  const q = Number(quota);
  const p = Number(period);
  if (!Number.isFinite(q) || !Number.isFinite(p) || q <= 0 || p <= 0) return null;
  return Math.max(1, Math.ceil(q / p));
}

/**
 * The cores this process may use: the CPUs its affinity mask allows (`os.availableParallelism()`,
 * which `taskset` narrows), capped by a cgroup v2 CPU quota (a container's `--cpus` or a Kubernetes
 * CPU limit) when `cpuMaxFile` holds one.
 */
export async function availableCores(cpuMaxFile = '/sys/fs/cgroup/cpu.max'): Promise<number> {
  const cpus = availableParallelism();
  let quota: number | null = null;
  try {
    quota = quotaCpus(await readFile(cpuMaxFile, 'utf8'));
  } catch {
    // No cgroup v2 file (another OS, cgroup v1, a sandbox): the affinity mask alone.
  }
  return quota === null ? cpus : Math.min(cpus, quota);
}

/**
 * The threads for `config` on a machine with `cores` usable cores. Threads share a port only where
 * the kernel spreads its connections across them (`SO_REUSEPORT` on Linux; macOS and Windows bind
 * but hand every connection to one socket), so `auto` is one thread elsewhere.
 */
export function resolveThreads(
  config: SluiceConfig,
  cores: number,
  platform: string = process.platform,
): ThreadCount {
  const w = config.server.workers;
  if (w !== 'auto') return { threads: w, reason: `server.workers ${w}` };
  if (cores <= 1) return { threads: 1, reason: 'server.workers auto: 1 core' };
  if (platform !== 'linux')
    return {
      threads: 1,
      reason: `server.workers auto: 1 thread, since threads share a port's connections only on Linux (this is ${platform})`,
    };
  const features = perThreadFeatures(config as unknown as Record<string, unknown>);
  if (features.length > 0) {
    const names = features.map((f) => f.what).join('; ');
    return {
      threads: 1,
      reason: `server.workers auto: 1 thread of ${cores} cores, since the config holds what worker threads cannot share yet: ${names}`,
    };
  }
  if (cores > MAX_THREADS)
    return {
      threads: MAX_THREADS,
      reason: `server.workers auto: ${cores} cores, at most ${MAX_THREADS} threads`,
    };
  return { threads: cores, reason: `server.workers auto: ${cores} cores` };
}
