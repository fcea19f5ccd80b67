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

/** The CPUs a cgroup v1 quota allows (`cpu.cfs_quota_us`, -1: none; `cpu.cfs_period_us`), or null. */
export function cfsQuotaCpus(quotaUs: string, periodUs: string): number | null {
  const q = Number(quotaUs.trim());
  const p = Number(periodUs.trim());
  if (!Number.isFinite(q) || !Number.isFinite(p) || q <= 0 || p <= 0) return null;
  return Math.max(1, Math.ceil(q / p));
}

/** `/a/b` and its ancestors: `/a/b`, `/a`, `` (the root). */
function ancestors(path: string): string[] {
  const parts = path.split('/').filter((p) => p !== '');
  const out: string[] = [];
  for (let i = parts.length; i >= 0; i--)
    out.push(
      parts
        .slice(0, i)
        .map((p) => `/${p}`)
        .join(''),
    );
  return out;
}

async function readOr(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch {
    return null;
  }
}

/**
 * The CPUs the cgroup CPU quotas of this process allow, or null when none is set: the smallest
 * quota of its cgroup and every ancestor (a container's `--cpus`, a Kubernetes CPU limit, a systemd
 * `CPUQuota=`), read from cgroup v2's `cpu.max` or cgroup v1's `cpu.cfs_quota_us` under `root`,
 * for the cgroups `selfCgroup` (`/proc/self/cgroup`) names.
 */
export async function cgroupCpus(
  root = '/sys/fs/cgroup',
  selfCgroup = '/proc/self/cgroup',
): Promise<number | null> {
  const self = await readOr(selfCgroup);
  if (self === null) return null;
  let least: number | null = null;
  const consider = (n: number | null): void => {
    if (n !== null && (least === null || n < least)) least = n;
  };
  for (const line of self.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (m === null) continue;
    const [, id, controllers, path] = m;
    if (id === '0' && controllers === '') {
      for (const dir of ancestors(path!)) {
        const text = await readOr(`${root}${dir}/cpu.max`);
        if (text !== null) consider(quotaCpus(text));
      }
    } else if (controllers!.split(',').includes('cpu')) {
      for (const mount of [`${root}/${controllers!}`, `${root}/cpu`]) {
        for (const dir of ancestors(path!)) {
          const quota = await readOr(`${mount}${dir}/cpu.cfs_quota_us`);
          const period = await readOr(`${mount}${dir}/cpu.cfs_period_us`);
          if (quota !== null && period !== null) consider(cfsQuotaCpus(quota, period));
        }
      }
    }
  }
  return least;
}

/**
 * The cores this process may use: the CPUs its affinity mask allows (`os.availableParallelism()`,
 * which `taskset` narrows), capped by its cgroups' CPU quotas (`cgroupCpus`; none elsewhere than
 * Linux).
 */
export async function availableCores(root?: string, selfCgroup?: string): Promise<number> {
  const cpus = availableParallelism();
  const quota = await cgroupCpus(root, selfCgroup);
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
