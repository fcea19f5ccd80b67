/**
 * The adaptive limit shared by the threads of `server.workers`: its state lives in the threads'
 * shared table (pool-state.ts `sharedAdaptiveState`), so one limit learns from every thread's
 * latencies and every thread's admission controller enforces it. Two controllers over one table
 * stand for two threads; a real worker thread feeds the same buffer in the last test.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import { sharedAdaptiveState } from '../../proxy/pool/pool-state.js';
import { SharedTable } from '../../proxy/runtime/shared-table.js';
import { ManualClock, TestTicket } from './test-ticket.js';

function threadController(table: SharedTable, clock: ManualClock): AdmissionController {
  return new AdmissionController({
    maxInFlightPerNode: 40,
    nodes: 1,
    timers: false,
    clock: clock.now,
    maxQueue: 0,
    adaptive: { minLimit: 2 },
    shared: table.record('admission', 'gpu'),
    sharedAdaptive: sharedAdaptiveState(table, 'gpu', 'settings'),
  });
}

/** Admits `n` requests in `c` and releases each after `latencyMs`. */
function run(c: AdmissionController, clock: ManualClock, latencyMs: number, n: number): void {
  for (let i = 0; i < n; i++) {
    const held: TestTicket[] = [];
    // Keep the pool busy: the limit only moves while at least half of it is in use.
    while (held.length < Math.ceil(c.limit / 2)) {
      const t = new TestTicket('a');
      if (c.offer(t) !== 'admitted') break;
      held.push(t);
    }
    clock.advance(latencyMs);
    for (const t of held) c.release(t, latencyMs);
  }
}

describe('the adaptive limit across threads', () => {
  it('is one limit: what one controller learns, the other enforces', () => {
    const table = new SharedTable({ shared: true, slots: 64 });
    const clock = new ManualClock();
    const a = threadController(table, clock);
    const b = threadController(table, clock);
    assert.equal(a.limit, 40);
    assert.equal(b.limit, 40);
    run(a, clock, 20, 30);
    run(a, clock, 200, 40);
    const learned = a.limit;
    assert.ok(learned < 20, `a fell to ${learned}`);
    // b saw no request: it reads the limit a's latencies set, and its offers are held to it.
    let admitted = 0;
    const held: TestTicket[] = [];
    for (let i = 0; i < 40; i++) {
      const t = new TestTicket('b');
      if (b.offer(t) === 'admitted') {
        admitted++;
        held.push(t);
      }
    }
    assert.equal(b.limit, learned);
    assert.equal(admitted, learned, 'b admits exactly the shared limit');
    for (const t of held) b.release(t, 20);
  });

  it('takes the samples of a real worker thread into the same limit', async () => {
    const table = new SharedTable({ shared: true, slots: 64 });
    const clock = new ManualClock();
    const main = threadController(table, clock);
    assert.equal(main.limit, 40);
    const code = `
      const { workerData, parentPort } = require('node:worker_threads');
      Promise.all([
        import(workerData.table),
        import(workerData.pool),
        import(workerData.adaptive),
      ]).then(([{ SharedTable }, { sharedAdaptiveState }, { AdaptiveLimit }]) => {
        const table = new SharedTable({ buffer: workerData.buffer, slots: 64 });
        const limit = new AdaptiveLimit({ minLimit: 2, maxLimit: 40 }, sharedAdaptiveState(table, 'gpu', 'settings'));
        for (let i = 0; i < 30; i++) limit.observe(20, 40);
        for (let i = 0; i < 60; i++) limit.observe(200, 40);
        parentPort.postMessage(limit.limit);
      });`;
    const url = (p: string): string => new URL(p, import.meta.url).href;
    const worker = new Worker(code, {
      eval: true,
      workerData: {
        buffer: table.buffer,
        table: url('../../proxy/runtime/shared-table.js'),
        pool: url('../../proxy/pool/pool-state.js'),
        adaptive: url('../../proxy/admission/adaptive-limit.js'),
      },
    });
    try {
      const there = await new Promise<number>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      assert.ok(there < 20, `the worker's limit fell to ${there}`);
      assert.equal(main.limit, there, 'the main thread enforces the limit the worker learned');
    } finally {
      await worker.terminate();
    }
  });
});

describe('the adaptive limit across reloads', () => {
  it('starts afresh when the main thread makes a limit of settings that were used before', () => {
    const table = new SharedTable({ shared: true, slots: 64 });
    const clock = new ManualClock();
    const first = threadController(table, clock);
    run(first, clock, 20, 30);
    run(first, clock, 200, 40);
    assert.ok(first.limit < 20, `fell to ${first.limit}`);
    // The same settings again (a reload to other settings and back): the main thread (no ledger)
    // starts the limit at its maximum, not at what the earlier fleet taught it.
    const again = threadController(table, clock);
    assert.equal(again.limit, 40);
    assert.equal(first.limit, 40, 'one state: the old controller reads it too');
  });
});
