/**
 * CPU accounting of the proxy benchmark, from /proc: a process's user + system time (all its
 * threads) from `/proc/PID/stat`, each core's busy and steal time from `/proc/stat`, and the
 * arithmetic that turns two snapshots and a wrk summary into one result record. Reading is
 * separate from the arithmetic, which is pure and tested.
 */
import { readFileSync } from 'node:fs';
import { errorCount, type WrkSummary } from './wrk-output.js';

/** Busy, total and steal time of one core, in clock ticks since boot. */
export interface CoreTimes {
  busy: number;
  total: number;
  steal: number;
}

/**
 * Per-core times from the text of /proc/stat (`cpu0 user nice system idle iowait irq softirq steal
 * ...`). Busy = user + nice + system + irq + softirq; total = busy + idle + iowait + steal. Index i
 * holds `cpuI`; the aggregate `cpu` line is skipped.
 */
export function parseCoreTimes(procStat: string): CoreTimes[] {
  const out: CoreTimes[] = [];
  for (const line of procStat.split('\n')) {
    const m = /^cpu(\d+)\s+(.*)$/.exec(line);
    if (m === null) continue;
    const f = m[2]!.trim().split(/\s+/).map(Number);
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
    const busy = user + nice + system + irq + softirq;
    out[Number(m[1])] = { busy, total: busy + idle + iowait + steal, steal };
  }
  return out;
}

/**
 * utime + stime of a process (all threads), in clock ticks, from the text of /proc/PID/stat. The
 * command name (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
 */
export function parseProcessTicks(pidStat: string): number {
  const rest = pidStat.slice(pidStat.lastIndexOf(')') + 2).split(' ');
  // After the name: state is field 3 of the man page (index 0 here); utime 14 and stime 15.
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error('unreadable /proc/PID/stat');
  return utime + stime;
}

/** Per-core times now. */
export function readCoreTimes(): CoreTimes[] {
  return parseCoreTimes(readFileSync('/proc/stat', 'utf8'));
}

/** Summed CPU ticks of the given processes now; a process that is gone counts 0. */
export function readTicks(pids: readonly number[]): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      sum += parseProcessTicks(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    } catch {
      // The process exited; the run's check of its server reports that.
    }
  }
  return sum;
}

/** Which run of which target a line of the results describes. */
export interface RunId {
  /** Round number, from 1 (0: before the rounds, e.g. a target dropped at start). */
  run: number;
  target: string;
  /** Description of the target in the report. */
  label: string;
  case: string;
}

/** What is known about a run besides the numbers. */
export interface RunMeta extends RunId {
  proxy: string;
  conns: number;
  durS: number;
  /** SSE writes per response (0 for plain answers). */
  chunksPerReq: number;
  /** False for a direct target: no proxy CPU to count. */
  hasProxy: boolean;
}

/** One measured run of one target: a line of the results JSONL. */
export interface BenchRecord extends Omit<RunMeta, 'hasProxy'> {
  requests: number;
  /** Completed requests per second of wall time. */
  rps: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  errors: number;
  /** Each core's busy share during the run, %. */
  corePct: number[];
  /** Steal time over all cores, % (a noisy neighbour on a virtual machine). */
  stealPct: number;
  /** Proxy processes' CPU as a share of one core, %. */
  proxyCpuPct: number;
  upstreamCpuPct: number;
  /** Proxy CPU per completed request, µs; null for a direct target or no request. */
  proxyUsPerReq: number | null;
  upstreamUsPerReq: number | null;
  /** Proxy CPU per forwarded SSE chunk, µs; null without chunks. */
  proxyUsPerChunk: number | null;
}

/** A run that produced no figures (wrk failed, or the target's server died): a results line too. */
export interface FailedRecord extends RunId {
  failed: string;
}

/** CPU readings before and after a run. */
export interface CpuDelta {
  coresBefore: readonly CoreTimes[];
  coresAfter: readonly CoreTimes[];
  /** Ticks of the proxy processes over the run. */
  proxyTicks: number;
  /** Ticks of the stand-in node over the run. */
  upstreamTicks: number;
  /** Clock ticks per second (USER_HZ, `getconf CLK_TCK`, 100 on Linux). */
  hz: number;
}

/**
 * The record of one run. CPU per request = ticks × (1e6 / hz) / requests µs; shares of a core are
 * ticks over the wall ticks of the run (the mean of the cores' totals).
 */
export function buildRecord(meta: RunMeta, wrk: WrkSummary, cpu: CpuDelta): BenchRecord {
  const n = Math.min(cpu.coresBefore.length, cpu.coresAfter.length);
  const corePct: number[] = [];
  let wallTicks = 0;
  let stealTicks = 0;
  let totalTicks = 0;
  for (let i = 0; i < n; i++) {
    const b = cpu.coresBefore[i]!;
    const a = cpu.coresAfter[i]!;
    const total = a.total - b.total;
    corePct.push(total > 0 ? (100 * (a.busy - b.busy)) / total : 0);
    totalTicks += total;
    stealTicks += a.steal - b.steal;
  }
  wallTicks = n > 0 ? totalTicks / n : 0;
  const usPerTick = 1e6 / cpu.hz;
  const perReq = (ticks: number): number | null =>
    wrk.requests > 0 ? (ticks * usPerTick) / wrk.requests : null;
  const proxyUsPerReq = meta.hasProxy ? perReq(cpu.proxyTicks) : null;
  return {
    run: meta.run,
    target: meta.target,
    label: meta.label,
    case: meta.case,
    proxy: meta.proxy,
    conns: meta.conns,
    durS: meta.durS,
    requests: wrk.requests,
    rps: wrk.requests / wrk.durationS,
    p50Ms: wrk.p50Ms,
    p90Ms: wrk.p90Ms,
    p99Ms: wrk.p99Ms,
    p999Ms: wrk.p999Ms,
    maxMs: wrk.maxMs,
    errors: errorCount(wrk),
    corePct,
    stealPct: totalTicks > 0 ? (100 * stealTicks) / totalTicks : 0,
    proxyCpuPct: meta.hasProxy && wallTicks > 0 ? (100 * cpu.proxyTicks) / wallTicks : 0,
    upstreamCpuPct: wallTicks > 0 ? (100 * cpu.upstreamTicks) / wallTicks : 0,
    proxyUsPerReq,
    upstreamUsPerReq: perReq(cpu.upstreamTicks),
    chunksPerReq: meta.chunksPerReq,
    proxyUsPerChunk:
      proxyUsPerReq !== null && meta.chunksPerReq > 0 ? proxyUsPerReq / meta.chunksPerReq : null,
  };
}
