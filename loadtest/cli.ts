/**
 * `sluice loadtest`: runs a scenario file and reports (`sluice loadtest SCENARIO.yaml`), or compares
 * two result files (`sluice loadtest compare A.json B.json`). Progress goes to stderr, the report to
 * stdout, files to `--out`. Resolves to the exit code and never calls `process.exit`; expected
 * failures are printed as messages, not stack traces.
 */

import { constants } from 'node:fs';
import { access, mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { LoadtestError, LoadtestErrorCode } from './loadtest-error.js';
import { compareResults, readResult, renderComparison } from './report/compare.js';
import { writeRunFiles, writeVariantsPlot } from './report/output-files.js';
import { renderReport } from './report/report-table.js';
import { renderVariantsSummary } from './report/variants-table.js';
import type { LoadtestResult } from './report/result.js';
import { runScenario } from './run-scenario.js';
import { loadScenarioFile } from './scenario/scenario-loader.js';

/** Usage text. */
export const LOADTEST_USAGE = [
  'usage: sluice loadtest SCENARIO.yaml [--out DIR] [--duration S] [--variant NAME] [--quiet]',
  '       sluice loadtest compare A.json B.json',
  '       sluice loadtest jobs-crash [--items N] [--kill-at F]',
  '  --out DIR       where result files go (default ./loadtest-results)',
  '  --duration S    measured phase in seconds, replacing the scenario duration_s',
  '  --variant NAME  run only this variant (default: every variant in turn)',
  '  --quiet         no progress lines',
  '  jobs-crash: a durable batch of N embeddings (default 10000), kill -9 of Sluice once a share F',
  '              (default 0.3) is done, restart, and a check that every result is there once, in order',
  'Scenarios: loadtest/scenarios/; format and results: docs/loadtesting.md',
].join('\n');

/** I/O seams for tests; defaults are the process streams, and SIGINT stops sending early. */
export interface LoadtestCliIo {
  /** Receives report lines (without newline). */
  stdout?: (line: string) => void;
  /** Receives progress and error lines (without newline). */
  stderr?: (line: string) => void;
  /** Stops sending early; when absent, the first SIGINT does. */
  signal?: AbortSignal;
}

/** Parsed run arguments. */
interface RunArgs {
  scenario: string;
  out: string;
  durationS: number | undefined;
  variant: string | undefined;
  quiet: boolean;
}

function usage(message: string): LoadtestError {
  return new LoadtestError(LoadtestErrorCode.usage, message);
}

function parseRunArgs(argv: readonly string[]): RunArgs {
  const out: RunArgs = {
    scenario: '',
    out: 'loadtest-results',
    durationS: undefined,
    variant: undefined,
    quiet: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    const value = (): string => {
      const v = eq < 0 ? argv[++i] : arg.slice(eq + 1);
      if (v === undefined || v === '') throw usage(`${flag} needs a value`);
      return v;
    };
    if (flag === '--out') out.out = value();
    else if (flag === '--variant') {
      if (out.variant !== undefined)
        throw usage('--variant may be given once (run the scenario again for another)');
      out.variant = value();
    } else if (flag === '--quiet') out.quiet = true;
    else if (flag === '--duration') {
      const raw = value();
      const n = Number(raw);
      if (!(n > 0 && n <= 3600))
        throw usage(`--duration must be a number of seconds from above 0 to 3600, got "${raw}"`);
      out.durationS = n;
    } else if (flag.startsWith('-')) throw usage(`unknown option ${flag}`);
    else if (out.scenario === '') out.scenario = arg;
    else throw usage(`unexpected argument "${arg}" (one scenario file per run)`);
  }
  if (out.scenario === '') throw usage('missing the scenario file');
  return out;
}

async function compare(argv: readonly string[], stdout: (l: string) => void): Promise<number> {
  if (argv.length !== 2) throw usage('compare needs exactly two result files');
  const [a, b] = await Promise.all(argv.map((f) => readResult(f)));
  const ra = a as LoadtestResult;
  const rb = b as LoadtestResult;
  for (const line of renderComparison(ra, rb, compareResults(ra, rb))) stdout(line);
  return 0;
}

async function run(
  args: RunArgs,
  io: Required<Omit<LoadtestCliIo, 'signal'>>,
  signal: AbortSignal,
): Promise<number> {
  const scenario = await loadScenarioFile(args.scenario);
  const dir = resolve(args.out);
  // The results directory is checked before the run: a run whose files cannot be written is lost.
  await checkWritable(dir);
  const results = await runScenario(scenario, {
    variant: args.variant,
    durationS: args.durationS,
    log: args.quiet ? undefined : io.stderr,
    warn: io.stderr,
    signal,
  });
  for (const r of results) {
    io.stdout('');
    for (const line of renderReport(r)) io.stdout(line);
    const files = await writeRunFiles(r, dir).catch((err: Error) => {
      throw new LoadtestError(
        LoadtestErrorCode.outputFailed,
        `cannot write results to ${dir}: ${err.message}`,
      );
    });
    io.stdout(`files: ${files.join(' ')}`);
  }
  const first = results[0];
  if (first !== undefined && results.length > 1) {
    for (const other of results.slice(1)) {
      io.stdout('');
      for (const line of renderComparison(first, other, compareResults(first, other))) io.stdout(line);
    }
    io.stdout('');
    for (const line of renderVariantsSummary(results)) io.stdout(line);
    io.stdout(`plots of all variants: ${(await writeVariantsPlot(results, dir)).join(' ')}`);
  }
  return 0;
}

/** Creates `dir` when missing and checks that files can be written in it; throws `outputFailed`. */
async function checkWritable(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
    await access(dir, constants.W_OK);
  } catch (err) {
    throw new LoadtestError(
      LoadtestErrorCode.outputFailed,
      `cannot write results to ${dir}: ${(err as Error).message}`,
    );
  }
}

/** `sluice loadtest jobs-crash`: prints the report as JSON; 0 when every check passed. */
async function jobsCrash(
  argv: readonly string[],
  stdout: (l: string) => void,
  stderr: (l: string) => void,
): Promise<number> {
  const opts: { items?: number; killAt?: number } = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = Number(argv[++i]);
    if (flag === '--items' && Number.isInteger(value) && value >= 1) opts.items = value;
    else if (flag === '--kill-at' && value > 0 && value < 1) opts.killAt = value;
    else throw usage(`jobs-crash: bad argument ${flag ?? ''} ${argv[i] ?? ''}`);
  }
  const { runJobsCrash } = await import('./jobs/crash-run.js');
  const report = await runJobsCrash({ ...opts, log: (l) => stderr(`jobs-crash: ${l}`) });
  stdout(JSON.stringify(report, null, 2));
  return report.ok ? 0 : 1;
}

/**
 * Runs `sluice loadtest` with `argv` (the arguments after `loadtest`). Resolves 0 on success (an
 * interrupted run that measured something included), 1 when a run could not be carried out (refused
 * target, Sluice or fleet did not start, interrupted before anything was measured), 2 for bad
 * arguments, an invalid scenario or an unreadable result file.
 */
export async function runLoadtestCli(argv: string[], io: LoadtestCliIo = {}): Promise<number> {
  // A reader that goes away (`| head`) must not end the run: the result files are still written.
  let stdoutGone = false;
  const onStdoutError = (err: NodeJS.ErrnoException): void => {
    if (err.code !== 'EPIPE') throw err;
    stdoutGone = true;
  };
  let stderrGone = false;
  const onStderrError = (err: NodeJS.ErrnoException): void => {
    if (err.code !== 'EPIPE') throw err;
    stderrGone = true;
  };
  if (io.stdout === undefined) process.stdout.on('error', onStdoutError);
  if (io.stderr === undefined) process.stderr.on('error', onStderrError);
  const stdout =
    io.stdout ??
    ((line: string) => {
      if (!stdoutGone) process.stdout.write(`${line}\n`);
    });
  const stderr =
    io.stderr ??
    ((line: string) => {
      if (!stderrGone) process.stderr.write(`${line}\n`);
    });
  const controller = new AbortController();
  const onSigint = (): void => {
    stderr('sluice loadtest: interrupted; finishing requests in flight (Ctrl-C again to kill)');
    controller.abort();
  };
  // SIGTERM (a CI job cancelled, `timeout`) ends the run as Ctrl-C does: drain, report, files.
  if (io.signal === undefined) {
    process.once('SIGINT', onSigint);
    process.once('SIGTERM', onSigint);
  }
  const signal = io.signal ?? controller.signal;
  try {
    if (argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
      stdout(LOADTEST_USAGE);
      return 0;
    }
    if (argv[0] === 'compare') return await compare(argv.slice(1), stdout);
    if (argv[0] === 'jobs-crash') return await jobsCrash(argv.slice(1), stdout, stderr);
    return await run(parseRunArgs(argv), { stdout, stderr }, signal);
  } catch (err) {
    if (!(err instanceof LoadtestError)) throw err;
    stderr(`sluice loadtest: ${err.message}`);
    for (const line of err.details) stderr(`  ${line}`);
    if (err.code === LoadtestErrorCode.usage) stderr(LOADTEST_USAGE);
    const input = [
      LoadtestErrorCode.usage,
      LoadtestErrorCode.scenarioInvalid,
      LoadtestErrorCode.resultInvalid,
    ] as string[];
    return input.includes(err.code) ? 2 : 1;
  } finally {
    process.off('SIGINT', onSigint);
    process.off('SIGTERM', onSigint);
    if (io.stdout === undefined) process.stdout.off('error', onStdoutError);
    if (io.stderr === undefined) process.stderr.off('error', onStderrError);
  }
}
