/**
 * `npm run bench`: what a proxy costs, side by side in one run on one machine over loopback. The
 * proxies under test (nginx with one worker, HAProxy with one thread, a bare uWS + undici forwarder,
 * Sluice in several configurations) are pinned to one CPU, wrk and the stand-in nodes to the other;
 * CPU per request (and per SSE chunk) comes from /proc. Results go to
 * `loadtest/results/bench/<stamp>/results.jsonl`; markdown tables go to stdout, progress to stderr.
 *
 *   node dist/loadtest/bench/bench-main.js              run (knobs: see bench-settings.ts)
 *   node dist/loadtest/bench/bench-main.js --dry-run    print the plan, check the configs, start nothing
 *   node dist/loadtest/bench/bench-main.js --report F   re-print the tables of a results file
 *
 * `loadtest/bench/bench.sh` (what `npm run bench` runs) bounds the whole run with `timeout` and
 * installs wrk, nginx and HAProxy when they are missing.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfig } from '../../config/loader.js';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { freePort } from '../env/free-port.js';
import { buildPlan, bodyFiles, describePlan, type BenchPlan, type PlannedTarget } from './bench-plan.js';
import { progressLine, parseResults, renderReport, type ResultLine } from './bench-report.js';
import { estimatedSeconds, readSettings } from './bench-settings.js';
import { measureOne, runTarget, smokeCheck } from './bench-runner.js';
import { CHAT_BODY, STREAM_BODY } from './chat-fixtures.js';
import { PinnedProcesses, childPids, type Pinned } from './pinned-processes.js';
import { describeMachine } from './machine-info.js';

function log(line: string): void {
  process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${line}\n`);
}

/** Sluice configurations the loader refuses: process name → errors. */
function configErrors(plan: BenchPlan): Map<string, string> {
  const out = new Map<string, string>();
  for (const p of plan.processes) {
    if (p.sluiceConfig === null) continue;
    const r = parseConfig(p.sluiceConfig, `${p.name}.yaml`);
    if (!r.ok) out.set(p.name, r.errors.map((e) => `${e.line}:${e.col} ${e.path}: ${e.message}`).join('; '));
  }
  return out;
}

function haveCommand(name: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0;
}

function stampNow(): string {
  const d = new Date();
  const p = (n: number): string => String(n).padStart(2, '0');
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

async function planFor(runDir: string): Promise<BenchPlan> {
  const settings = readSettings(process.env);
  const overlays = new Map<string, string>();
  for (const f of settings.extraConfigs) overlays.set(f, readFileSync(f, 'utf8'));
  return buildPlan(
    settings,
    {
      root: findSluiceRoot(),
      distBench: dirname(fileURLToPath(import.meta.url)),
      runDir,
      node: process.execPath,
    },
    freePort,
    overlays,
  );
}

/** The targets without those `test` selects; each dropped one is logged and recorded as failed. */
function drop(
  targets: PlannedTarget[],
  test: (t: PlannedTarget) => boolean,
  why: string,
  failures: ResultLine[],
): PlannedTarget[] {
  const kept: PlannedTarget[] = [];
  for (const t of targets) {
    if (!test(t)) {
      kept.push(t);
      continue;
    }
    log(`dropping ${t.name}: ${why}`);
    failures.push({ run: 0, target: t.name, label: t.label, case: t.case, failed: why });
  }
  return kept;
}

async function run(plan: BenchPlan): Promise<number> {
  const s = plan.settings;
  const failures: ResultLine[] = [];
  let targets = [...plan.targets];
  for (const [name, errors] of configErrors(plan)) {
    targets = drop(
      targets,
      (t) => t.server === name,
      `Sluice refuses the configuration: ${errors}`,
      failures,
    );
  }
  if (!haveCommand('wrk')) {
    log('wrk is not installed (apt-get install wrk); loadtest/bench/bench.sh installs it');
    return 1;
  }
  for (const tool of ['nginx', 'haproxy']) {
    if (!haveCommand(tool))
      targets = drop(targets, (t) => t.proxy === tool, `${tool} is not installed`, failures);
  }
  mkdirSync(join(plan.dir, 'nginx', 'tmp'), { recursive: true });
  for (const f of plan.files) writeFileSync(f.path, f.text);
  const bodies = bodyFiles(plan.dir);
  writeFileSync(bodies.chat, CHAT_BODY);
  writeFileSync(bodies.stream, STREAM_BODY);
  const resultsFile = join(plan.dir, 'results.jsonl');
  writeFileSync(resultsFile, '');
  const record = (line: ResultLine): void => {
    appendFileSync(resultsFile, `${JSON.stringify(line)}\n`);
    process.stderr.write(`${progressLine(line)}\n`);
  };
  for (const f of failures) record(f);

  // This process only waits while wrk runs, but it must not wake up on the proxies' CPU.
  spawnSync('taskset', ['-a', '-p', '-c', s.loadCpus, String(process.pid)], { stdio: 'ignore' });
  const machine = describeMachine(plan);
  writeFileSync(join(plan.dir, 'machine.txt'), machine);
  process.stdout.write(`${machine}\n`);
  log(
    `${targets.length} targets, about ${Math.round(estimatedSeconds(s, targets.length) / 60)} min; results in ${resultsFile}`,
  );

  const procs = new PinnedProcesses(plan.dir);
  const stop = (signal: NodeJS.Signals): void => {
    log(`${signal}: stopping every process this run started`);
    void procs.stopAll(1000).then(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const running = new Map<string, Pinned>();
    // Nodes first: the proxies' configurations point at them.
    for (const role of ['node', 'proxy'] as const) {
      const specs = plan.processes.filter(
        (p) => p.role === role && targets.some((t) => t.server === p.name || t.nodeProcess === p.name),
      );
      const started = specs.map((p) => ({
        spec: p,
        pinned: procs.start(p.name, p.cpus, p.command, p.args, p.env),
      }));
      for (const { spec, pinned } of started) {
        try {
          await procs.waitForHttp(pinned, spec.port, 20_000);
          running.set(spec.name, pinned);
        } catch (err) {
          const why = err instanceof Error ? err.message : String(err);
          targets = drop(
            targets,
            (t) => t.server === spec.name || t.nodeProcess === spec.name,
            why,
            failures,
          );
          if (role === 'node') log(why);
        }
      }
    }
    for (const f of failures.splice(0)) record(f);
    const pidsOf = (t: PlannedTarget): number[] => {
      const p = running.get(t.server);
      if (p === undefined) return [];
      return t.proxy === 'nginx' ? [p.pid, ...childPids(p.pid)] : [p.pid];
    };

    const ok: PlannedTarget[] = [];
    for (const t of targets) {
      const problem = await smokeCheck(t);
      if (problem === null) ok.push(t);
      else
        record({ run: 0, target: t.name, label: t.label, case: t.case, failed: `smoke check: ${problem}` });
    }
    for (const t of ok) {
      log(`pre-warm ${t.name} (${s.prewarmS} s)`);
      await runTarget(procs, plan, t, s.prewarmS);
    }
    for (let round = 1; round <= s.runs; round++) {
      for (const t of ok) {
        log(`round ${round}/${s.runs}: ${t.name}`);
        const node = running.get(t.nodeProcess)!;
        const server = t.proxy === 'direct' ? node : running.get(t.server)!;
        record(await measureOne(procs, plan, t, round, node, server, pidsOf(t)));
      }
    }
  } finally {
    await procs.stopAll();
  }
  const lines = parseResults(readFileSync(resultsFile, 'utf8'));
  process.stdout.write(`\n${renderReport(lines)}`);
  process.stdout.write(`\nresults: ${resultsFile}\nre-print: npm run bench -- --report ${resultsFile}\n`);
  return 0;
}

async function main(argv: readonly string[]): Promise<number> {
  const reportAt = argv.indexOf('--report');
  if (reportAt >= 0) {
    const file = argv[reportAt + 1];
    if (file === undefined) {
      process.stderr.write('usage: bench-main.js --report RESULTS.jsonl\n');
      return 2;
    }
    process.stdout.write(renderReport(parseResults(readFileSync(file, 'utf8'))));
    return 0;
  }
  const runDir = join(findSluiceRoot(), 'loadtest', 'results', 'bench', stampNow());
  const plan = await planFor(runDir);
  if (argv.includes('--dry-run')) {
    process.stdout.write(describePlan(plan));
    const errors = configErrors(plan);
    for (const [name, e] of errors) process.stdout.write(`config refused: ${name}: ${e}\n`);
    process.stdout.write(
      `estimated time: about ${Math.round(estimatedSeconds(plan.settings, plan.targets.length) / 60)} min\n`,
    );
    return errors.size === 0 ? 0 : 1;
  }
  return run(plan);
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`bench: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 2;
}
