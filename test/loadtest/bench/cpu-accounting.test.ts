/** CPU accounting from /proc text: core times, process ticks, and the per-request arithmetic. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  buildRecord,
  parseCoreTimes,
  parseProcessTicks,
  readCoreTimes,
  readTicks,
  type CoreTimes,
  type RunMeta,
} from '../../../loadtest/bench/cpu-accounting.js';
import type { WrkSummary } from '../../../loadtest/bench/wrk-output.js';

const PROC_STAT = [
  'cpu  300 0 100 1000 10 0 5 2 0 0',
  'cpu0 100 0 50 400 5 0 5 1 0 0',
  'cpu1 200 0 50 600 5 0 0 1 0 0',
  'intr 12345',
  'ctxt 999',
].join('\n');

function wrk(requests: number, durationS = 10): WrkSummary {
  return {
    requests,
    durationS,
    bytes: 0,
    errors: { connect: 0, read: 0, write: 1, status: 2, timeout: 0 },
    p50Ms: 1,
    p90Ms: 2,
    p99Ms: 3,
    p999Ms: 4,
    maxMs: 5,
  };
}

const meta: RunMeta = {
  run: 2,
  target: 'sluice-min',
  label: 'Sluice',
  case: 'fast',
  proxy: 'sluice',
  conns: 50,
  durS: 10,
  chunksPerReq: 0,
  hasProxy: true,
};

/** Two cores over a 10 s run at 100 ticks/s: core 0 half busy, core 1 fully busy, 10 ticks stolen. */
const before: CoreTimes[] = [
  { busy: 1000, total: 5000, steal: 0 },
  { busy: 2000, total: 6000, steal: 0 },
];
const after: CoreTimes[] = [
  { busy: 1500, total: 6000, steal: 10 },
  { busy: 3000, total: 7000, steal: 0 },
];

describe('CPU accounting', () => {
  it('reads busy, total and steal per core, skipping the aggregate line', () => {
    assert.deepEqual(parseCoreTimes(PROC_STAT), [
      { busy: 155, total: 561, steal: 1 },
      { busy: 250, total: 856, steal: 1 },
    ]);
  });

  it('reads utime + stime of a process whose name holds spaces and parentheses', () => {
    const stat = '4242 (node (bench) x) S 1 4242 4242 0 -1 4194304 500 0 0 0 1234 567 0 0 20 0 11 0 99';
    assert.equal(parseProcessTicks(stat), 1234 + 567);
  });

  it('reads this machine’s /proc: every core, and this process’s ticks growing with work', () => {
    const cores = readCoreTimes();
    assert.ok(cores.length >= 1 && cores.every((c) => c.total >= c.busy && c.busy >= 0));
    const t0 = readTicks([process.pid]);
    const until = performance.now() + 60;
    let x = 0;
    while (performance.now() < until) x += Math.sqrt(x + 1);
    assert.ok(x > 0 && readTicks([process.pid]) > t0);
    assert.equal(readTicks([0x7ffffff0]), 0, 'a process that is gone counts 0');
  });

  it('turns ticks into µs per request, core shares and steal', () => {
    // 250 proxy ticks at 100/s = 2.5 s of CPU over 50,000 requests = 50 µs each.
    const r = buildRecord(meta, wrk(50_000), {
      coresBefore: before,
      coresAfter: after,
      proxyTicks: 250,
      upstreamTicks: 100,
      hz: 100,
    });
    assert.equal(r.proxyUsPerReq, 50);
    assert.equal(r.upstreamUsPerReq, 20);
    assert.equal(r.rps, 5000);
    assert.equal(r.errors, 3);
    assert.deepEqual(r.corePct, [50, 100]);
    assert.equal(r.stealPct, 0.5);
    // Wall time is 1000 ticks per core: 250 ticks are a quarter of one core.
    assert.equal(r.proxyCpuPct, 25);
    assert.equal(r.upstreamCpuPct, 10);
    assert.equal(r.proxyUsPerChunk, null);
    assert.equal(r.target, 'sluice-min');
    assert.equal(r.run, 2);
  });

  it('divides by the SSE chunks of each stream for CPU per chunk', () => {
    const r = buildRecord({ ...meta, chunksPerReq: 64 }, wrk(1000), {
      coresBefore: before,
      coresAfter: after,
      proxyTicks: 64,
      upstreamTicks: 0,
      hz: 100,
    });
    assert.equal(r.proxyUsPerReq, 640);
    assert.equal(r.proxyUsPerChunk, 10);
  });

  it('counts no proxy CPU for a direct target and no per-request figure without requests', () => {
    const direct = buildRecord({ ...meta, hasProxy: false }, wrk(1000), {
      coresBefore: before,
      coresAfter: after,
      proxyTicks: 999,
      upstreamTicks: 50,
      hz: 100,
    });
    assert.equal(direct.proxyUsPerReq, null);
    assert.equal(direct.proxyCpuPct, 0);
    assert.equal(direct.upstreamUsPerReq, 500);
    const none = buildRecord(meta, wrk(0), {
      coresBefore: before,
      coresAfter: after,
      proxyTicks: 5,
      upstreamTicks: 5,
      hz: 100,
    });
    assert.equal(none.proxyUsPerReq, null);
    assert.equal(none.rps, 0);
  });
});
