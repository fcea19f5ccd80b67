/**
 * `npm run micro [-- FILTER...]`: finds every compiled `*.bench.js` beside this file, runs the
 * benchmarks whose name or file contains one of the filters (case-insensitive; all without a
 * filter), prints a markdown table, and exits 1 when a benchmark broke a promise (its p99 limit, or
 * allocating while marked allocation-free) or when nothing matched. Run with `--expose-gc` (the npm
 * script does) so the heap check starts from a collected heap. Environment: `MICRO_SAMPLES`
 * (default 20000), `MICRO_WARMUP_MS` (default 300).
 */
import { dirname, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findBenchFiles, loadBenchmarks, selectBenchmarks } from './micro-discovery.js';
import {
  DEFAULT_MICRO_OPTIONS,
  renderMicroTable,
  runMicroBenchmark,
  type MicroOptions,
} from './micro-runner.js';

function optionsFromEnv(env: NodeJS.ProcessEnv): MicroOptions {
  const num = (name: string, fallback: number): number => {
    const v = Number(env[name]);
    return env[name] !== undefined && Number.isInteger(v) && v > 0 ? v : fallback;
  };
  return {
    ...DEFAULT_MICRO_OPTIONS,
    samples: num('MICRO_SAMPLES', DEFAULT_MICRO_OPTIONS.samples),
    warmupMs: num('MICRO_WARMUP_MS', DEFAULT_MICRO_OPTIONS.warmupMs),
  };
}

async function main(filters: readonly string[]): Promise<number> {
  const dir = dirname(fileURLToPath(import.meta.url));
  const selected = selectBenchmarks(await loadBenchmarks(findBenchFiles(dir)), filters);
  if (selected.length === 0) {
    process.stderr.write(`micro: no benchmark matches ${filters.join(' ')}\n`);
    return 1;
  }
  const options = optionsFromEnv(process.env);
  if (typeof (globalThis as { gc?: unknown }).gc !== 'function') {
    process.stderr.write('micro: run with node --expose-gc for a steadier heap check\n');
  }
  process.stdout.write(`node ${process.version}, ${options.samples} samples per benchmark\n\n`);
  const results = [];
  for (const { file, benchmark } of selected) {
    process.stderr.write(`${relative(dir, file)}: ${benchmark.name}\n`);
    results.push(await runMicroBenchmark(benchmark, options));
  }
  process.stdout.write(renderMicroTable(results));
  return results.some((r) => r.failures.length > 0) ? 1 : 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`micro: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 2;
}
