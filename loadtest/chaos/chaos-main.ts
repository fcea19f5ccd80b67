/**
 * `npm run chaos`: the fault and overload cases against real Sluice processes on loopback, one
 * after another, each bounded in time, then a pass/fail table; exit 1 when a case failed. Cases:
 * the broken-node table, every node down, overload shedding under a flood, reload under load,
 * SIGTERM during a rolling restart, certificate swaps under TLS traffic. `--quick` runs short
 * versions (about a minute in all); `--only WORD` runs the cases whose name contains WORD.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { stopChild, type Child } from '../env/child-process.js';
import { freePort } from '../env/free-port.js';
import { serveChild } from '../env/sluice-process.js';
import { BrokenNode } from './broken-node.js';
import {
  FAULT_CASES,
  FAULT_TABLE_KEY,
  faultTableConfig,
  nodeViews,
  noNodeLatency,
  runFaultCase,
  type FaultTarget,
} from './fault-table.js';
import { floodProblems, runOverloadFlood } from './overload-flood.js';
import { reloadLoadProblems, runReloadUnderLoad } from './reload-under-load.js';
import { runSigtermDrain } from './sigterm-drain.js';
import { runTlsSwap, tlsSwapProblems } from './tls-swap.js';

/** One row of the table. */
interface Row {
  name: string;
  /** PASS, FAIL, or INFO for a measured behaviour that is documented rather than required. */
  verdict: 'PASS' | 'FAIL' | 'INFO';
  detail: string;
  ms: number;
}

interface ChaosArgs {
  quick: boolean;
  only: string | null;
}

function parseArgs(argv: readonly string[]): ChaosArgs | string {
  const out: ChaosArgs = { quick: false, only: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quick') out.quick = true;
    else if (a === '--only') {
      const v = argv[++i];
      if (v === undefined) return '--only needs a word';
      out.only = v;
    } else return `unknown option ${a ?? ''}`;
  }
  return out;
}

function loopbackHead(port: number, admin: number): string {
  return `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\nadmin:\n  address: 127.0.0.1\n  port: ${admin}\n`;
}

/** Starts `sluice serve` on `yaml` (in `dir`) and resolves with it and its URLs once it is up. */
async function serve(
  dir: string,
  yaml: string,
  port: number,
  admin: number,
): Promise<{ child: Child } & FaultTarget> {
  const file = join(dir, `sluice-${port}.yaml`);
  await writeFile(file, yaml);
  const child = await serveChild(file);
  return { child, url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${admin}` };
}

async function brokenNodeRows(dir: string): Promise<Row[]> {
  const rows: Row[] = [];
  process.env['BROKEN_NODES_KEY'] = FAULT_TABLE_KEY;
  const node = await BrokenNode.start();
  const port = await freePort();
  const admin = await freePort();
  const s = await serve(dir, faultTableConfig(loopbackHead(port, admin), [node.url]), port, admin);
  try {
    for (const c of FAULT_CASES) {
      const t0 = performance.now();
      const problems = await runFaultCase(s, node, c);
      const want = c.expect.kind === 'status' ? `${c.expect.status} ${c.expect.code}` : c.expect.kind;
      rows.push({
        name: `broken node: ${c.fault}${c.stream ? ' (stream)' : ''}`,
        verdict: problems.length === 0 ? 'PASS' : 'FAIL',
        detail:
          problems.length === 0 ? `${want}; connection dropped; counters back to 0` : problems.join('; '),
        ms: performance.now() - t0,
      });
    }
  } finally {
    await stopChild(s.child);
    await node.close();
  }
  return rows;
}

async function allDownRow(dir: string): Promise<Row> {
  const t0 = performance.now();
  const dead = [await freePort(), await freePort()].map((p) => `http://127.0.0.1:${p}`);
  const port = await freePort();
  const admin = await freePort();
  const s = await serve(
    dir,
    faultTableConfig(
      loopbackHead(port, admin),
      dead,
      '    health: { active: { path: /health, interval_ms: 100, timeout_ms: 100, unhealthy_threshold: 1, healthy_threshold: 1 } }\n',
    ),
    port,
    admin,
  );
  try {
    const deadline = performance.now() + 10_000;
    while (!(await nodeViews(s)).every((n) => !n.available)) {
      if (performance.now() > deadline) throw new Error('the nodes were never marked down');
      await new Promise((r) => setTimeout(r, 20));
    }
    const r = await noNodeLatency(s, 500);
    const metrics = await (await fetch(`${s.adminUrl}/metrics`)).text();
    const queued = /sluice_admission_total\{pool="gpu",outcome="queued"\} (\d+)/.exec(metrics)?.[1];
    const problems = [...r.problems];
    if (!(r.medianMs < 10)) problems.push(`median ${r.medianMs.toFixed(2)} ms`);
    if (queued !== '0') problems.push(`${queued} requests queued`);
    return {
      name: 'every node down: 503 + Retry-After, nothing queued',
      verdict: problems.length === 0 ? 'PASS' : 'FAIL',
      detail: `${problems.length === 0 ? '' : `${problems.slice(0, 3).join('; ')}; `}500 answers, median ${r.medianMs.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms`,
      ms: performance.now() - t0,
    };
  } finally {
    await stopChild(s.child);
  }
}

async function floodRow(quick: boolean): Promise<Row> {
  const t0 = performance.now();
  const r = await runOverloadFlood({ durationMs: quick ? 6000 : 10_000, clients: 128 });
  const problems = floodProblems(r);
  return {
    name: 'overload: flood past the event-loop threshold',
    verdict: problems.length === 0 ? 'PASS' : 'FAIL',
    detail: `${problems.length === 0 ? '' : `${problems.join('; ')}; `}${r.shed} shed (503 proxy_overloaded), ${r.ok} served (p50 ${r.okP50Ms.toFixed(0)} ms, p99 ${r.okP99Ms.toFixed(0)} ms), ${r.episodes} episode(s), 200 again ${r.recoveredMs.toFixed(0)} ms after the flood`,
    ms: performance.now() - t0,
  };
}

async function reloadRow(quick: boolean): Promise<Row> {
  const t0 = performance.now();
  const target = 1000;
  const r = await runReloadUnderLoad({
    durationMs: quick ? 8000 : 30_000,
    rate: target,
    streams: 100,
    reloadEveryMs: 1000,
  });
  const problems = reloadLoadProblems(r);
  const rate = r.requestsPerSecond >= target * 0.95 ? '' : ` (target ${target}/s not reached: machine busy?)`;
  return {
    name: `reload under load (${r.durationMs / 1000} s, 100 streams, 1 reload/s valid/invalid)`,
    verdict: problems.length === 0 ? 'PASS' : 'FAIL',
    detail: `${problems.length === 0 ? '' : `${problems.join('; ')}; `}${r.requests} requests at ${r.requestsPerSecond}/s${rate}, p99 ${r.p99Ms} ms, 0 of them failed: ${r.requestFailures === 0}, ${r.streamsCompleted} streams, ${r.reloadsApplied} applied / ${r.reloadsRejected} rejected, descriptors ${r.fdsEarly.toFixed(0)} → ${r.fdsLate.toFixed(0)}, RSS ${r.rssMb[0] ?? '-'} → ${r.rssMb.at(-1) ?? '-'} MB`,
    ms: performance.now() - t0,
  };
}

async function sigtermRows(quick: boolean): Promise<Row[]> {
  const rows: Row[] = [];
  let t0 = performance.now();
  const k = await runSigtermDrain({ rounds: quick ? 2 : 4, clients: 16 });
  const slow = k.rounds.filter((x) => x.exitCode !== 0 || x.exitMs >= k.drainTimeoutMs);
  const kProblems = [
    ...Object.entries(k.failures).map(([c, n]) => `${n} × ${c}`),
    ...(k.streamsFailed > 0 ? [`${k.streamsFailed} streams cut`] : []),
    ...slow.map((x) => `exit ${x.exitCode} after ${x.exitMs.toFixed(0)} ms`),
  ];
  rows.push({
    name: 'SIGTERM + restart, keep-alive clients retrying refusals',
    verdict: kProblems.length === 0 ? 'PASS' : 'FAIL',
    detail: `${kProblems.length === 0 ? '' : `${kProblems.join('; ')}; `}${k.rounds.length} restarts, ${k.ok} answered, ${k.retries} refusals retried, ${k.streamsOk} streams finished across the signal, exits ${k.rounds.map((x) => `${x.exitCode}/${x.exitMs.toFixed(0)} ms`).join(' ')}`,
    ms: performance.now() - t0,
  });
  t0 = performance.now();
  const n = await runSigtermDrain({ rounds: quick ? 2 : 4, clients: 16, newConnectionShare: 1 });
  const nProblems = Object.entries(n.failures).map(([c, x]) => `${x} × ${c}`);
  rows.push({
    name: 'SIGTERM + restart, a new connection per request',
    verdict: nProblems.length > 0 ? 'FAIL' : n.acceptResets > 0 ? 'INFO' : 'PASS',
    detail: `${nProblems.length === 0 ? '' : `${nProblems.join('; ')}; `}${n.ok} answered, ${n.retries} refusals retried, ${n.acceptResets} reset by the kernel in the accept queue when the listener closed (documented)`,
    ms: performance.now() - t0,
  });
  return rows;
}

async function tlsRow(quick: boolean): Promise<Row> {
  const t0 = performance.now();
  const r = await runTlsSwap({ durationMs: quick ? 4000 : 10_000 });
  const problems = tlsSwapProblems(r);
  return {
    name: 'TLS: certificate swapped every second under traffic',
    verdict: problems.length === 0 ? 'PASS' : 'FAIL',
    detail: `${problems.length === 0 ? '' : `${problems.join('; ')}; `}${r.requests} requests on ${r.connections} connections, ${r.swaps} swaps, new connections saw ${r.certsSeen} certificates, ${r.oldConnectionsServed} requests on connections older than a swap`,
    ms: performance.now() - t0,
  };
}

/** Runs the cases `argv` selects; resolves to the exit code. */
export async function runChaos(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`chaos: ${args}\nusage: npm run chaos -- [--quick] [--only WORD]\n`);
    return 2;
  }
  const dir = await mkdtemp(join(tmpdir(), 'sluice-chaos-'));
  const cases: [string, () => Promise<Row[]>][] = [
    ['broken-nodes', () => brokenNodeRows(dir)],
    ['all-down', async () => [await allDownRow(dir)]],
    ['overload', async () => [await floodRow(args.quick)]],
    ['reload', async () => [await reloadRow(args.quick)]],
    ['sigterm', () => sigtermRows(args.quick)],
    ['tls', async () => [await tlsRow(args.quick)]],
  ];
  const rows: Row[] = [];
  try {
    for (const [name, run] of cases) {
      if (args.only !== null && !name.includes(args.only)) continue;
      process.stderr.write(`chaos: ${name} ...\n`);
      const t0 = performance.now();
      try {
        rows.push(...(await run()));
      } catch (e) {
        rows.push({
          name,
          verdict: 'FAIL',
          detail: `did not run: ${(e as Error).message}`,
          ms: performance.now() - t0,
        });
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const width = Math.max(...rows.map((r) => r.name.length));
  process.stdout.write('\nresult  case'.padEnd(width + 9) + '  time    detail\n');
  for (const r of rows)
    process.stdout.write(
      `${r.verdict.padEnd(6)}  ${r.name.padEnd(width)}  ${`${(r.ms / 1000).toFixed(1)} s`.padStart(6)}  ${r.detail}\n`,
    );
  const failed = rows.filter((r) => r.verdict === 'FAIL').length;
  process.stdout.write(
    `\n${rows.length} cases: ${rows.filter((r) => r.verdict === 'PASS').length} passed, ${failed} failed, ${rows.filter((r) => r.verdict === 'INFO').length} measured (INFO)\n`,
  );
  return failed > 0 ? 1 : 0;
}

process.exitCode = await runChaos(process.argv.slice(2));
