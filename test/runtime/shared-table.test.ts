/**
 * The shared state table: threads that share its buffer find the same record for a key and
 * different records for different keys, and their concurrent adds and subtracts are exact. Real
 * worker threads, hammering the same cells at once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { SharedTable } from '../../proxy/runtime/shared-table.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

const MODULE = new URL('../../proxy/runtime/shared-table.js', import.meta.url).href;

/**
 * A thread that claims `keys` in its own order, then adds (1, cost) to each `rounds` times and takes
 * back all but `keep` of them, and posts the cell index it found for each key.
 */
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
import(workerData.module).then(({ SharedTable }) => {
  const t = new SharedTable({ buffer: workerData.buffer, slots: workerData.slots });
  const found = {};
  const cells = workerData.keys.map((k) => { const c = t.record('node', k); found[k] = c.cell; return c; });
  for (let r = 0; r < workerData.rounds; r++) {
    for (const c of cells) { Atomics.add(c.cells, c.cell, 1); Atomics.add(c.cells, c.cell + 1, 7); }
    if (r >= workerData.keep) for (const c of cells) { Atomics.sub(c.cells, c.cell, 1); Atomics.sub(c.cells, c.cell + 1, 7); }
  }
  parentPort.postMessage(found);
});
`;

function runThread(data: Record<string, unknown>): Promise<Record<string, number>> {
  return new Promise((resolve, reject) => {
    const w = new Worker(THREAD, { eval: true, workerData: data });
    w.once('message', (m: Record<string, number>) => resolve(m));
    w.once('error', reject);
    w.once('exit', (code) => {
      if (code !== 0) reject(new Error(`thread exited with ${code}`));
    });
  });
}

describe('shared state table', () => {
  it('gives threads the same cells for a key and exact counts under concurrent updates', async () => {
    const slots = 64;
    const table = new SharedTable({ slots, shared: true });
    assert.equal(table.shared, true);
    const keys = Array.from({ length: 40 }, (_, i) => `gpu|http://10.0.0.${i}:8000|0|2000|sluice`);
    const rounds = 20_000;
    const keep = 3;
    const [a, b] = await Promise.all([
      runThread({ module: MODULE, buffer: table.buffer, slots, keys, rounds, keep }),
      runThread({ module: MODULE, buffer: table.buffer, slots, keys: [...keys].reverse(), rounds, keep }),
    ]);
    assert.deepEqual(a, b, 'both threads found the same cells');
    assert.equal(new Set(Object.values(a)).size, keys.length, 'one cell pair per key');
    for (const k of keys) {
      const c = table.record('node', k);
      assert.equal(c.cell, a[k], 'this thread finds them too');
      assert.equal(c.cells[c.cell], 2 * keep, `in flight of ${k}`);
      assert.equal(c.cells[c.cell + 1], 2 * keep * 7, `cost of ${k}`);
    }
  });

  it('refuses a key past its capacity with a message that says what to do', () => {
    const table = new SharedTable({ slots: 4 });
    for (let i = 0; i < 4; i++) table.record('node', `k${i}`);
    assert.equal(table.record('node', 'k2').cell, table.record('node', 'k2').cell);
    assert.throws(
      () => table.record('node', 'k4'),
      /shared state table is full \(4 distinct nodes, limits and buckets since start\); restart/,
    );
  });

  it('backs a node: two node objects with the same cells see the attempts of both', async () => {
    const table = new SharedTable({ slots: 8, shared: true });
    const opts = { connections: 1, connectTimeoutMs: 1000 };
    const n1 = new UpstreamNode('http://127.0.0.1:9', opts, table.record('node', 'x'));
    const n2 = new UpstreamNode('http://127.0.0.1:9', opts, table.record('node', 'x'));
    const other = new UpstreamNode('http://127.0.0.1:9', opts, table.record('node', 'y'));
    n1.addLoad(100);
    n2.addLoad(50);
    assert.deepEqual([n1.inFlight, n1.inFlightCost, n2.inFlight, n2.inFlightCost], [2, 150, 2, 150]);
    assert.deepEqual([other.inFlight, other.inFlightCost], [0, 0]);
    n1.removeLoad(50);
    assert.deepEqual([n2.inFlight, n2.inFlightCost], [1, 100]);
    await Promise.all([n1.close(), n2.close(), other.close()]);
  });
});

/**
 * A thread with a ledger: takes load on node `x` (3 attempts of 40 tokens, one given back), two
 * slots of concurrency limit `c` and one of its admission counts, then ends without giving back the
 * rest (as a thread that died would).
 */
const DYING_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
Promise.all([import(workerData.table), import(workerData.node), import(workerData.conc)]).then(
  ([{ SharedTable }, { UpstreamNode }, { ConcurrencyLimit }]) => {
    const t = new SharedTable({ buffer: workerData.buffer, slots: workerData.slots, ledger: workerData.ledger });
    const node = new UpstreamNode('http://127.0.0.1:9', { connections: 1, connectTimeoutMs: 1000 }, t.record('node', 'x'));
    node.addLoad(40);
    node.tryAddLoad(40);
    node.addLoad(40);
    node.removeLoad(40);
    const limit = new ConcurrencyLimit('c', 10, t.record('conc', 'c'));
    limit.tryAcquire();
    limit.tryAcquire();
    parentPort.postMessage('done');
  },
);
`;

describe("a dead thread's ledger", () => {
  it("gives back exactly what the thread held of the shared counts, the other threads' counts kept", async () => {
    const slots = 64;
    const table = new SharedTable({ slots, shared: true });
    const opts = { connections: 1, connectTimeoutMs: 1000 };
    const mine = new UpstreamNode('http://127.0.0.1:9', opts, table.record('node', 'x'));
    mine.addLoad(5);
    const ledger = new SharedArrayBuffer(SharedTable.ledgerBytes(slots));
    await new Promise<void>((resolve, reject) => {
      const w = new Worker(DYING_THREAD, {
        eval: true,
        workerData: {
          table: MODULE,
          node: new URL('../../proxy/upstream/upstream-node.js', import.meta.url).href,
          conc: new URL('../../proxy/ratelimit/concurrency-limit.js', import.meta.url).href,
          buffer: table.buffer,
          slots,
          ledger,
        },
      });
      w.once('error', reject);
      w.once('exit', () => resolve());
      w.once('message', () => void w.terminate());
    });
    const conc = table.record('conc', 'c');
    assert.deepEqual([mine.inFlight, mine.inFlightCost, conc.cells[conc.cell]], [3, 85, 2], 'held by both');
    const corrected = table.release(new Int32Array(ledger));
    assert.equal(corrected, 3, 'in flight, tokens and the concurrency slots');
    assert.deepEqual(
      [mine.inFlight, mine.inFlightCost, conc.cells[conc.cell]],
      [1, 5, 0],
      "this thread's own",
    );
    assert.ok(
      new Int32Array(ledger).every((v) => v === 0),
      'the ledger is emptied',
    );
    assert.equal(table.release(new Int32Array(ledger)), 0, 'a second release changes nothing');
    await mine.close();
  });
});

/**
 * A thread that declares the bucket `key` (capacity `capacity`, no refill: a stopped clock) in the
 * shared store, tries `tries` takes of one request each, and posts how many were admitted; and
 * acquires the concurrency limit `conc` (limit `limit`) as often as it lets it.
 */
const LIMITS_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
Promise.all([
  import(workerData.table),
  import(workerData.store),
  import(workerData.conc),
]).then(([{ SharedTable }, { SharedMemoryStore }, { ConcurrencyLimit }]) => {
  const t = new SharedTable({ buffer: workerData.buffer, slots: workerData.slots });
  const store = new SharedMemoryStore(t, () => 1000);
  const b = store.bucket(workerData.key, 'requests', workerData.capacity, 1);
  const levels = [0];
  let admitted = 0;
  for (let i = 0; i < workerData.tries; i++) if (store.take([b], 1, levels) === 0) admitted++;
  const limit = new ConcurrencyLimit('c', workerData.limit, t.record('conc', 'c'));
  let held = 0;
  for (let i = 0; i < workerData.tries; i++) if (limit.tryAcquire()) held++;
  parentPort.postMessage({ admitted, held });
});
`;

describe('limits in the shared table', () => {
  it('admits exactly a bucket of requests and a concurrency limit over two threads', async () => {
    const slots = 64;
    const table = new SharedTable({ slots, shared: true });
    const data = {
      table: MODULE,
      store: new URL('../../proxy/ratelimit/shared-memory-store.js', import.meta.url).href,
      conc: new URL('../../proxy/ratelimit/concurrency-limit.js', import.meta.url).href,
      buffer: table.buffer,
      slots,
      key: '{t}:req',
      capacity: 25_000,
      tries: 40_000,
      limit: 30_000,
    };
    const run = (): Promise<{ admitted: number; held: number }> =>
      new Promise((resolve, reject) => {
        const w = new Worker(LIMITS_THREAD, { eval: true, workerData: data });
        w.once('message', resolve);
        w.once('error', reject);
      });
    const [a, b] = await Promise.all([run(), run()]);
    assert.equal(a.admitted + b.admitted, 25_000, `admitted ${a.admitted} + ${b.admitted}`);
    assert.equal(a.held + b.held, 30_000, `held ${a.held} + ${b.held}`);
    assert.equal(table.record('conc', 'c').cells[table.record('conc', 'c').cell], 30_000);
  });
});

describe("the shared table's lock", () => {
  it('is freed for the others when the thread that held it died, and only then', async () => {
    const table = new SharedTable({ shared: true, slots: 16 });
    // A real worker thread (index 3) takes the lock and ends without giving it back.
    const code = `
      const { workerData, parentPort } = require('node:worker_threads');
      import(workerData.module).then(({ SharedTable }) => {
        const t = new SharedTable({ buffer: workerData.buffer, slots: 16, thread: 3 });
        t.lock();
        parentPort.postMessage('locked');
      });`;
    const worker = new Worker(code, {
      eval: true,
      workerData: {
        buffer: table.buffer,
        module: new URL('../../proxy/runtime/shared-table.js', import.meta.url).href,
      },
    });
    await new Promise<void>((resolve, reject) => {
      worker.once('message', () => resolve());
      worker.once('error', reject);
    });
    await worker.terminate();
    assert.equal(table.releaseLockOf(2), false, 'another thread index does not free it');
    assert.equal(table.releaseLockOf(0), false);
    assert.equal(table.releaseLockOf(3), true, "the dead thread's lock is freed");
    table.lock();
    assert.equal(table.releaseLockOf(3), false, "the main thread's own lock is not the dead thread's");
    table.unlock();
  });
});
