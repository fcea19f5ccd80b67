/**
 * The test command's runner: every compiled `*.test.js` file in its own Node process, two at a
 * time, each under a wall-clock limit. A file that fails, crashes or outlives its limit (a hang, or
 * a server a suite left open) fails the run, and the report names the file and what it left open,
 * so `npm test` can never hang. It reads no test results but each file's own TAP summary.
 *
 * Usage (from the project root or `dist/`):
 *   node dist/test/runner/run-tests.js [FILTER...]
 * FILTER keeps files whose path contains it (`test/lifecycle`, `framing`). Environment:
 * `SLUICE_TEST_CONCURRENCY` (default 2), `SLUICE_TEST_FILE_TIMEOUT_MS` (default 180000).
 */
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Grace after SIGUSR2 (report what is open) before SIGKILL, ms. */
const REPORT_GRACE_MS = 3000;

/** What one file's process did. */
export interface FileResult {
  file: string;
  /** Counts from the file's TAP summary; all zero when it never printed one. */
  tests: number;
  pass: number;
  fail: number;
  skipped: number;
  cancelled: number;
  /** Exit code, or null when killed. */
  code: number | null;
  timedOut: boolean;
  /** What the process still held open when its limit passed (from the open-handles preload). */
  openHandles: string | null;
  /** `# SKIP` reasons the file printed (each once). */
  skips: string[];
  ms: number;
  output: string;
}

/** True when the file passed: exit 0, in time, no failed or cancelled test. */
export function passed(r: FileResult): boolean {
  return r.code === 0 && !r.timedOut && r.fail === 0 && r.cancelled === 0;
}

/** Reads the counters of a TAP summary (`# tests 3`, `# pass 2`, ...); the last value wins. */
export function tapSummary(
  output: string,
): Pick<FileResult, 'tests' | 'pass' | 'fail' | 'skipped' | 'cancelled'> {
  const read = (name: string): number => {
    const re = new RegExp(`^# ${name} (\\d+)$`, 'gm');
    let v = 0;
    for (const m of output.matchAll(re)) v = Number(m[1]);
    return v;
  };
  return {
    tests: read('tests'),
    pass: read('pass'),
    fail: read('fail'),
    skipped: read('skipped'),
    cancelled: read('cancelled'),
  };
}

/** The distinct reasons of `# SKIP reason` lines. */
export function skipReasons(output: string): string[] {
  const out = new Set<string>();
  for (const m of output.matchAll(/# SKIP (.+)$/gm)) out.add(m[1]!.trim());
  return [...out];
}

/** Every `*.test.js` below `dir`, sorted, as paths relative to `base`. */
export function findTestFiles(dir: string, base: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.test.js')) out.push(relative(base, p).split(sep).join('/'));
    }
  };
  walk(dir);
  return out.sort();
}

/** Runs one test file in its own process under `limitMs`. `cwd` is `dist/`. */
export function runFile(file: string, cwd: string, limitMs: number, preload: string): Promise<FileResult> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test-reporter=tap', '--import', preload, file], {
      cwd,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    let timedOut = false;
    let killer: NodeJS.Timeout | null = null;
    const limit = setTimeout(() => {
      timedOut = true;
      // The preload answers SIGUSR2 by printing what is still open and exiting; a blocked event
      // loop cannot, so SIGKILL follows.
      child.kill('SIGUSR2');
      killer = setTimeout(() => child.kill('SIGKILL'), REPORT_GRACE_MS);
    }, limitMs);
    child.once('close', (code) => {
      clearTimeout(limit);
      if (killer !== null) clearTimeout(killer);
      const open = /^\[open handles\] (.*)$/m.exec(output);
      resolve({
        file,
        ...tapSummary(output),
        code,
        timedOut,
        openHandles: open === null ? null : open[1]!,
        skips: skipReasons(output),
        ms: Date.now() - started,
        output,
      });
    });
  });
}

/** Runs `files` with at most `concurrency` processes at a time, reporting each as it ends. */
export async function runAll(
  files: readonly string[],
  cwd: string,
  opts: { concurrency: number; limitMs: number; preload: string; onResult(r: FileResult): void },
): Promise<FileResult[]> {
  const results: FileResult[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < files.length) {
      const file = files[next++]!;
      const r = await runFile(file, cwd, opts.limitMs, opts.preload);
      results.push(r);
      opts.onResult(r);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, opts.concurrency) }, worker));
  return results;
}

function describeResult(r: FileResult): string {
  const secs = (r.ms / 1000).toFixed(1);
  if (r.timedOut) {
    return (
      `not ok ${r.file}: still running after its ${secs} s limit` +
      (r.openHandles === null ? ' (no report: the event loop was blocked)' : `; left open: ${r.openHandles}`)
    );
  }
  if (!passed(r)) {
    return `not ok ${r.file}: exit ${r.code ?? 'killed'}, ${r.fail} failed, ${r.cancelled} cancelled (${secs} s)`;
  }
  const skipped = r.skipped > 0 ? `, ${r.skipped} skipped` : '';
  return `ok ${r.file} (${r.tests} tests${skipped}, ${secs} s)`;
}

async function main(): Promise<void> {
  const here = dirname(fileURLToPath(import.meta.url));
  const dist = join(here, '..', '..');
  const filters = process.argv.slice(2);
  // First-party plugins keep their tests beside them (plugins/<name>/*.test.ts).
  const all = [...findTestFiles(join(dist, 'test'), dist), ...findTestFiles(join(dist, 'plugins'), dist)];
  const files = filters.length === 0 ? all : all.filter((f) => filters.some((x) => f.includes(x)));
  if (files.length === 0) {
    console.error(`no test file matches ${filters.join(' ')}`);
    process.exit(1);
  }
  const concurrency = Number(process.env['SLUICE_TEST_CONCURRENCY'] ?? 2);
  const limitMs = Number(process.env['SLUICE_TEST_FILE_TIMEOUT_MS'] ?? 180_000);
  const preload = pathToFileURL(join(here, 'open-handles.js')).href;
  const started = Date.now();
  const results = await runAll(files, dist, {
    concurrency,
    limitMs,
    preload,
    onResult(r) {
      // A failing file's whole output, so the failure can be read without a re-run.
      if (!passed(r)) process.stdout.write(`${r.output}\n`);
      process.stdout.write(`${describeResult(r)}\n`);
    },
  });
  const sum = (k: 'tests' | 'pass' | 'fail' | 'skipped' | 'cancelled'): number =>
    results.reduce((a, r) => a + r[k], 0);
  const bad = results.filter((r) => !passed(r));
  const skips = new Set(results.flatMap((r) => r.skips));
  console.log(
    `\n# files ${results.length}, tests ${sum('tests')}, pass ${sum('pass')}, fail ${sum('fail')}, ` +
      `skipped ${sum('skipped')}, cancelled ${sum('cancelled')}, ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  for (const s of skips) console.log(`# SKIPPED: ${s}`);
  if (bad.length > 0) {
    console.log(`# FAILED: ${bad.map((r) => r.file).join(', ')}`);
    process.exit(1);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
