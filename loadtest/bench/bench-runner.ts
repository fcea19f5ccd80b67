/**
 * One target at a time: a smoke check that the proxy answers the benchmark's request correctly,
 * unrecorded wrk runs (pre-warm, warm-up), and the measured run with CPU snapshots around it.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import {
  buildRecord,
  readCoreTimes,
  readTicks,
  type BenchRecord,
  type FailedRecord,
} from './cpu-accounting.js';
import { wrkArgs, wrkEnv, type BenchPlan, type PlannedTarget } from './bench-plan.js';
import { BENCH_API_KEY, STREAM_CHUNKS } from './chat-fixtures.js';
import { PinnedProcesses, pause, repin, type Pinned } from './pinned-processes.js';
import { parseWrkOutput } from './wrk-output.js';

/** Grace beyond its duration before a wrk run is killed, ms. */
const WRK_GRACE_MS = 20_000;

/** USER_HZ, the unit of /proc's CPU times (`getconf CLK_TCK`; 100 when it cannot be asked). */
let hz = 0;
function clockTicks(): number {
  if (hz === 0) {
    const v = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim());
    hz = Number.isInteger(v) && v > 0 ? v : 100;
  }
  return hz;
}

/**
 * Sends the target's request once and checks the answer: 200 and a chat.completion, or, for a
 * streamed target, `STREAM_CHUNKS` events ending in `[DONE]`. Null when it is right, else why not.
 */
export async function smokeCheck(t: PlannedTarget): Promise<string | null> {
  try {
    const r = await fetch(t.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` },
      body: readFileSync(t.bodyFile),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await r.text();
    if (r.status !== 200) return `status ${r.status}: ${text.slice(0, 300)}`;
    if (t.body === 'chat')
      return text.includes('"chat.completion"') ? null : `unexpected body ${text.slice(0, 200)}`;
    const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).length;
    // The last write holds two events: the closing chunk and [DONE].
    if (events !== STREAM_CHUNKS + 1 || !text.includes('data: [DONE]')) {
      return `expected ${STREAM_CHUNKS + 1} SSE events ending in [DONE], got ${events}`;
    }
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/** Runs wrk against the target for `seconds` (unrecorded); returns its output. */
export async function runTarget(
  procs: PinnedProcesses,
  plan: BenchPlan,
  t: PlannedTarget,
  seconds: number,
): Promise<string> {
  const [, cpus, command, ...args] = wrkArgs(plan, t, seconds);
  const r = await procs.run(cpus!, command!, args, wrkEnv(t), seconds * 1000 + WRK_GRACE_MS);
  return r.timedOut ? `${r.output}\n(wrk killed after ${seconds} s + grace)` : r.output;
}

/**
 * One measured round of one target: warm-up, pause, CPU snapshot, wrk, CPU snapshot. For a direct
 * target the stand-in node is moved to the proxies' CPU for the run, as a proxy would be.
 */
export async function measureOne(
  procs: PinnedProcesses,
  plan: BenchPlan,
  t: PlannedTarget,
  round: number,
  node: Pinned,
  server: Pinned,
  proxyPids: readonly number[],
): Promise<BenchRecord | FailedRecord> {
  const s = plan.settings;
  const direct = t.proxy === 'direct';
  if (direct) repin(node.pid, s.proxyCpus);
  let output: string;
  let cpu;
  try {
    await runTarget(procs, plan, t, s.warmS);
    await pause(500);
    const coresBefore = readCoreTimes();
    const proxyBefore = readTicks(proxyPids);
    const nodeBefore = readTicks([node.pid]);
    output = await runTarget(procs, plan, t, s.durS);
    const coresAfter = readCoreTimes();
    cpu = {
      coresBefore,
      coresAfter,
      proxyTicks: readTicks(proxyPids) - proxyBefore,
      upstreamTicks: readTicks([node.pid]) - nodeBefore,
      hz: clockTicks(),
    };
  } finally {
    if (direct) repin(node.pid, s.loadCpus);
  }
  await pause(1000);
  const failed = (why: string): FailedRecord => ({
    run: round,
    target: t.name,
    label: t.label,
    case: t.case,
    failed: why,
  });
  if (!PinnedProcesses.alive(server)) return failed(`${server.name} exited: ${server.tail.join(' | ')}`);
  try {
    const wrk = parseWrkOutput(output);
    return buildRecord(
      {
        run: round,
        target: t.name,
        label: t.label,
        case: t.case,
        proxy: t.proxy,
        conns: t.conns,
        durS: s.durS,
        chunksPerReq: t.chunksPerReq,
        hasProxy: !direct,
      },
      wrk,
      cpu,
    );
  } catch (err) {
    return failed(err instanceof Error ? err.message : String(err));
  }
}
