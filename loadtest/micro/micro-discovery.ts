/**
 * Finds micro-benchmarks: every compiled `*.bench.js` file below a folder, its `benchmarks` export
 * checked, and a name filter. A new `*.bench.ts` under `loadtest/micro/` is picked up as it is.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { MicroBenchmark } from './micro-benchmark.js';

/** A benchmark and the file it came from. */
export interface FoundBenchmark {
  file: string;
  benchmark: MicroBenchmark;
}

/** Every `*.bench.js` below `dir`, sorted. */
export function findBenchFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.bench.js')) out.push(join(entry.parentPath, entry.name));
  }
  return out.sort();
}

/** A bench file whose `benchmarks` export is missing or malformed. */
export class BenchFileError extends Error {
  override readonly name = 'BenchFileError';
}

function isBenchmark(v: unknown): v is MicroBenchmark {
  const b = v as Partial<MicroBenchmark> | null;
  return typeof b === 'object' && b !== null && typeof b.name === 'string' && typeof b.setup === 'function';
}

/** Imports the files and returns their benchmarks in file order. Throws `BenchFileError` on a bad export. */
export async function loadBenchmarks(files: readonly string[]): Promise<FoundBenchmark[]> {
  const out: FoundBenchmark[] = [];
  for (const file of files) {
    const mod = (await import(pathToFileURL(file).href)) as { benchmarks?: unknown };
    if (!Array.isArray(mod.benchmarks) || !mod.benchmarks.every(isBenchmark)) {
      throw new BenchFileError(`${file}: expected \`export const benchmarks: MicroBenchmark[]\``);
    }
    for (const benchmark of mod.benchmarks) out.push({ file, benchmark });
  }
  return out;
}

/** The benchmarks whose name or file contains one of `filters` (all of them for no filter). */
export function selectBenchmarks(
  found: readonly FoundBenchmark[],
  filters: readonly string[],
): FoundBenchmark[] {
  if (filters.length === 0) return [...found];
  const fs = filters.map((f) => f.toLowerCase());
  return found.filter((x) => {
    const hay = `${x.benchmark.name}\n${x.file}`.toLowerCase();
    return fs.some((f) => hay.includes(f));
  });
}
