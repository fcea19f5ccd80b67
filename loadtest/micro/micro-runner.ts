/**
 * Runs micro-benchmarks (`MicroBenchmark`): warm-up, per-call timing with percentiles, a heap check
 * for benchmarks that promise not to allocate, and the p99 bound where one is promised. Knows
 * nothing about files or the command line (see micro-main.ts); everything it runs is bounded in
 * calls and in time.
 */
import { PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import type { MicroBenchmark } from './micro-benchmark.js';

/** How hard to measure. */
export interface MicroOptions {
  /** Timed samples per benchmark. */
  samples: number;
  /** Warm-up before timing, ms (at least `minWarmupCalls` calls whatever the time). */
  warmupMs: number;
  minWarmupCalls: number;
  /** Calls in one heap-check window. */
  allocationCalls: number;
  /** Longest time spent taking samples, ms; sampling stops early past it. */
  maxSamplingMs: number;
}

export const DEFAULT_MICRO_OPTIONS: MicroOptions = {
  samples: 20_000,
  warmupMs: 300,
  minWarmupCalls: 20_000,
  allocationCalls: 100_000,
  maxSamplingMs: 3000,
};

/**
 * A sample is one timed batch of calls lasting about this long, ns: calls faster than this are
 * timed in batches (the sample is the batch's mean per call), slower ones one by one.
 */
const SAMPLE_TARGET_NS = 1000;
const MAX_BATCH = 1024;

/**
 * Heap growth per call above which a benchmark marked `allocationFree` fails, bytes. The smallest
 * V8 object is 16 bytes, so an operation that allocates on every call is far above it; the window's
 * own bookkeeping is a few hundred bytes over `allocationCalls` calls.
 */
export const ALLOCATION_LIMIT_BYTES = 1;

/** Calls in the short heap-check windows that catch an operation allocating on every call. */
const SHORT_WINDOW_CALLS = 1000;

/** What one benchmark measured. */
export interface MicroResult {
  name: string;
  /** Calls per timed sample (1 = every call timed on its own). */
  batch: number;
  samples: number;
  p50Ns: number;
  p99Ns: number;
  maxNs: number;
  meanNs: number;
  /** Heap growth per call over a window without GC, bytes; null when no such window was had. */
  heapBytesPerCall: number | null;
  /** What it promised (`p99 ≤ 500 ns`, `no allocation`), for the report. */
  promises: string[];
  /** Broken promises and errors; empty when it passed. */
  failures: string[];
}

/** Keeps results alive so the optimiser cannot drop the calls. */
let sink: unknown = null;

/** The last value a benchmark returned (read by tests so `sink` is observably used). */
export function lastValue(): unknown {
  return sink;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, i)]!;
}

/** Median cost of reading the clock twice, ns: subtracted from every sample. */
function clockOverheadNs(): number {
  const n = 2000;
  const d = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const a = performance.now();
    d[i] = performance.now() - a;
  }
  d.sort();
  return d[n >> 1]! * 1e6;
}

function gcIfExposed(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === 'function') gc();
}

/**
 * Heap growth per call of `op` over `calls` calls, bytes: the least of up to `tries` windows in which
 * no garbage collection ran (a collection inside a window hides what was allocated), stopping at the
 * first window within the limit. Taking the least drops one-off costs: feedback vectors, compiled
 * code, and the boxed numbers of unoptimised code while an optimised version is still being
 * compiled (late on a busy machine). Null when every window saw a collection.
 */
async function leastGrowth(op: () => unknown, calls: number, tries: number): Promise<number | null> {
  let collections = 0;
  const observer = new PerformanceObserver((list) => {
    collections += list.getEntries().length;
  });
  observer.observe({ entryTypes: ['gc'] });
  let best: number | null = null;
  try {
    for (let attempt = 0; attempt < tries; attempt++) {
      gcIfExposed();
      // Let the collection's own entry arrive before the window opens.
      await new Promise((resolve) => setTimeout(resolve, 10));
      collections = 0;
      const before = getHeapStatistics().used_heap_size;
      for (let i = 0; i < calls; i++) sink = op();
      const after = getHeapStatistics().used_heap_size;
      await new Promise((resolve) => setTimeout(resolve, 10));
      if (collections > 0) continue;
      const perCall = Math.max(0, after - before) / calls;
      best = best === null ? perCall : Math.min(best, perCall);
      if (best <= ALLOCATION_LIMIT_BYTES) break;
    }
  } finally {
    observer.disconnect();
  }
  return best;
}

let heapCheckWarm = false;

/**
 * Runs the heap check's own loop on a few throwaway operations first, so that its compilation (and
 * its call site turning megamorphic) happens before any window that is measured.
 */
async function warmHeapCheck(): Promise<void> {
  if (heapCheckWarm) return;
  heapCheckWarm = true;
  let x = 0;
  const ops = [
    (): number => x++,
    (): number => x--,
    (): number => (x += 2),
    (): number => (x -= 2),
    (): number => x,
  ];
  for (let round = 0; round < 4; round++) {
    for (const op of ops) await leastGrowth(op, 20 * SHORT_WINDOW_CALLS, 1);
  }
}

/**
 * Heap bytes allocated per call: short windows first (an operation that allocates on every call
 * shows there, before a collection can hide it), then, if those look clean, `calls`-call windows
 * for the precise figure. Null when collections ran in every window.
 */
async function heapBytesPerCall(op: () => unknown, calls: number): Promise<number | null> {
  await warmHeapCheck();
  const short = await leastGrowth(op, SHORT_WINDOW_CALLS, 3);
  if (short === null || short > ALLOCATION_LIMIT_BYTES) return short;
  return leastGrowth(op, calls, 8);
}

/** Runs one benchmark. Never throws: a failing setup or operation is reported in `failures`. */
export async function runMicroBenchmark(b: MicroBenchmark, options: MicroOptions): Promise<MicroResult> {
  const promises: string[] = [];
  if (b.p99LimitNs !== undefined) promises.push(`p99 ≤ ${b.p99LimitNs} ns`);
  if (b.allocationFree === true) promises.push('no allocation');
  const result: MicroResult = {
    name: b.name,
    batch: 0,
    samples: 0,
    p50Ns: NaN,
    p99Ns: NaN,
    maxNs: NaN,
    meanNs: NaN,
    heapBytesPerCall: null,
    promises,
    failures: [],
  };
  try {
    const op = b.setup();
    // Warm-up: let the optimising compiler see the operation at its steady state.
    const warmEnd = performance.now() + options.warmupMs;
    let warm = 0;
    while (warm < options.minWarmupCalls || performance.now() < warmEnd) {
      for (let i = 0; i < 64; i++) sink = op();
      warm += 64;
    }
    const probeCalls = 1000;
    const p0 = performance.now();
    for (let i = 0; i < probeCalls; i++) sink = op();
    const probeNs = ((performance.now() - p0) * 1e6) / probeCalls;
    const batch = Math.min(MAX_BATCH, Math.max(1, Math.ceil(SAMPLE_TARGET_NS / Math.max(probeNs, 1))));
    const overhead = clockOverheadNs();
    const samples = new Float64Array(options.samples);
    const stopAt = performance.now() + options.maxSamplingMs;
    let n = 0;
    let total = 0;
    while (n < samples.length) {
      const a = performance.now();
      for (let i = 0; i < batch; i++) sink = op();
      const z = performance.now();
      const ns = Math.max(0, ((z - a) * 1e6 - overhead) / batch);
      samples[n++] = ns;
      total += ns;
      if ((n & 255) === 0 && z > stopAt) break;
    }
    const taken = samples.subarray(0, n).sort();
    result.batch = batch;
    result.samples = n;
    result.p50Ns = percentile(taken, 50);
    result.p99Ns = percentile(taken, 99);
    result.maxNs = taken[n - 1]!;
    result.meanNs = total / n;
    result.heapBytesPerCall = await heapBytesPerCall(op, options.allocationCalls);
  } catch (err) {
    result.failures.push(`threw: ${err instanceof Error ? err.message : String(err)}`);
    return result;
  }
  if (b.p99LimitNs !== undefined && !(result.p99Ns <= b.p99LimitNs)) {
    result.failures.push(`p99 ${result.p99Ns.toFixed(0)} ns above its limit of ${b.p99LimitNs} ns`);
  }
  if (b.allocationFree === true) {
    const bytes = result.heapBytesPerCall;
    if (bytes === null) {
      result.failures.push('a garbage collection ran in every heap-check window');
    } else if (bytes > ALLOCATION_LIMIT_BYTES) {
      result.failures.push(`allocates ${bytes.toFixed(1)} B per call`);
    }
  }
  return result;
}

function ns(v: number): string {
  if (!Number.isFinite(v)) return '–';
  return v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1);
}

/** The results as a markdown table, failures listed under it. */
export function renderMicroTable(results: readonly MicroResult[]): string {
  const lines = [
    '| benchmark | batch | p50 ns | p99 ns | max ns | mean ns | heap B/call | promises | result |',
    '| --- | --: | --: | --: | --: | --: | --: | --- | --- |',
  ];
  for (const r of results) {
    const heap = r.heapBytesPerCall === null ? '–' : r.heapBytesPerCall.toFixed(1);
    lines.push(
      `| ${r.name} | ${r.batch} | ${ns(r.p50Ns)} | ${ns(r.p99Ns)} | ${ns(r.maxNs)} | ${ns(r.meanNs)} | ${heap} | ` +
        `${r.promises.join(', ') || '–'} | ${r.failures.length === 0 ? 'ok' : 'FAILED'} |`,
    );
  }
  const failed = results.filter((r) => r.failures.length > 0);
  if (failed.length > 0) {
    lines.push('', ...failed.map((r) => `FAILED ${r.name}: ${r.failures.join('; ')}`));
  }
  return `${lines.join('\n')}\n`;
}
