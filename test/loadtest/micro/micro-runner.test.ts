/**
 * The micro-benchmark runner, with tiny iteration counts: what a run reports, the promises it
 * checks (no allocation, a p99 bound), discovery of `*.bench.js` files, the command line, and that
 * every shipped benchmark sets up and runs. No timing is asserted.
 */

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { findSluiceRoot } from '../../../config/sluice-root.js';
import type { MicroBenchmark } from '../../../loadtest/micro/micro-benchmark.js';
import {
  BenchFileError,
  findBenchFiles,
  loadBenchmarks,
  selectBenchmarks,
} from '../../../loadtest/micro/micro-discovery.js';
import {
  lastValue,
  renderMicroTable,
  runMicroBenchmark,
  type MicroOptions,
} from '../../../loadtest/micro/micro-runner.js';

const TINY: MicroOptions = {
  samples: 200,
  warmupMs: 1,
  minWarmupCalls: 200,
  allocationCalls: 2000,
  maxSamplingMs: 500,
};

const microDir = join(findSluiceRoot(), 'dist', 'loadtest', 'micro');
const scratch = mkdtempSync(join(tmpdir(), 'sluice-micro-test-'));

let counter = 0;
const increment: MicroBenchmark = { name: 'test: increment', setup: () => () => ++counter };

describe('micro-benchmark runner', { timeout: 120_000 }, () => {
  after(() => rmSync(scratch, { recursive: true, force: true }));

  it('reports samples, batch and ordered percentiles, and calls the operation it was given', async () => {
    const before = counter;
    const r = await runMicroBenchmark(increment, TINY);
    assert.deepEqual(r.failures, []);
    assert.equal(r.name, 'test: increment');
    assert.ok(r.samples > 0 && r.samples <= TINY.samples, `${r.samples} samples`);
    assert.ok(r.batch >= 1);
    assert.ok(r.p50Ns <= r.p99Ns && r.p99Ns <= r.maxNs, `${r.p50Ns} ${r.p99Ns} ${r.maxNs}`);
    assert.ok(counter - before >= TINY.minWarmupCalls + r.samples * r.batch);
    assert.equal(lastValue(), counter);
    assert.deepEqual(r.promises, []);
  });

  it('fails a benchmark marked allocation-free whose operation allocates', async () => {
    const r = await runMicroBenchmark(
      {
        name: 'test: allocates',
        allocationFree: true,
        setup: () => () => new Array<number>(128).fill(counter++),
      },
      TINY,
    );
    assert.deepEqual(r.promises, ['no allocation']);
    assert.equal(r.failures.length, 1);
    assert.match(r.failures[0]!, /allocates [\d.]+ B per call|garbage collection ran in every/);
  });

  it('checks a promised p99 bound', async () => {
    const impossible = await runMicroBenchmark({ ...increment, p99LimitNs: 1e-9 }, TINY);
    assert.match(impossible.failures.join(), /p99 \d+ ns above its limit of 1e-9 ns/);
    const generous = await runMicroBenchmark({ ...increment, p99LimitNs: 1e12 }, TINY);
    assert.deepEqual(generous.failures, []);
    assert.deepEqual(generous.promises, ['p99 ≤ 1000000000000 ns']);
  });

  it('reports a setup or an operation that throws instead of stopping', async () => {
    const setup = await runMicroBenchmark(
      {
        name: 'test: bad setup',
        setup: () => {
          throw new Error('no fixture');
        },
      },
      TINY,
    );
    assert.deepEqual(setup.failures, ['threw: no fixture']);
    const op = await runMicroBenchmark(
      {
        name: 'test: bad op',
        setup: () => () => {
          throw new Error('boom');
        },
      },
      TINY,
    );
    assert.deepEqual(op.failures, ['threw: boom']);
    const table = renderMicroTable([op]);
    assert.match(table, /\| test: bad op \| .* \| FAILED \|/);
    assert.match(table, /FAILED test: bad op: threw: boom/);
  });

  it('finds the shipped bench files and filters benchmarks by name or file, ignoring case', async () => {
    const files = findBenchFiles(microDir);
    for (const f of ['balance.bench.js', 'route.bench.js', 'ratelimit.bench.js', 'metrics.bench.js']) {
      assert.ok(
        files.some((x) => x.endsWith(f)),
        f,
      );
    }
    assert.ok(!files.some((x) => x.endsWith('micro-runner.js')));
    const found = await loadBenchmarks(files);
    const names = (filters: string[]): string[] =>
      selectBenchmarks(found, filters).map((x) => x.benchmark.name);
    assert.ok(names(['CONSISTENT-HASH']).every((n) => n.includes('consistent-hash')));
    assert.ok(names(['CONSISTENT-HASH']).length >= 1);
    assert.ok(names(['metrics.bench']).every((n) => n.startsWith('metrics:')));
    assert.equal(names([]).length, found.length);
    assert.deepEqual(names(['no such benchmark']), []);
  });

  it('refuses a bench file without a benchmarks array', async () => {
    const bad = join(scratch, 'bad.bench.js');
    writeFileSync(bad, 'export const benchmark = [];\n');
    assert.deepEqual(findBenchFiles(scratch), [bad]);
    await assert.rejects(loadBenchmarks([bad]), BenchFileError);
  });

  it('sets up and runs every shipped benchmark without an error', async () => {
    const found = await loadBenchmarks(findBenchFiles(microDir));
    assert.ok(found.length >= 10, `${found.length} benchmarks`);
    for (const { benchmark } of found) {
      const r = await runMicroBenchmark(benchmark, TINY);
      assert.ok(
        !r.failures.some((f) => f.startsWith('threw')),
        `${benchmark.name}: ${r.failures.join('; ')}`,
      );
      assert.ok(r.samples > 0, benchmark.name);
    }
  });

  it('runs from the command line with a filter, and exits 1 when nothing matches', () => {
    const main = join(microDir, 'micro-main.js');
    const env = { ...process.env, MICRO_SAMPLES: '100', MICRO_WARMUP_MS: '1' };
    const ok = spawnSync(process.execPath, ['--expose-gc', main, 'header key'], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.match(ok.stdout, /\| affinity: header key \(x-session-id\) \|/);
    assert.doesNotMatch(ok.stdout, /balance:/);
    const none = spawnSync(process.execPath, [main, 'no such benchmark'], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(none.status, 1);
    assert.match(none.stderr, /no benchmark matches no such benchmark/);
  });
});
