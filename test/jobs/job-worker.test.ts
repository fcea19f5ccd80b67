import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RecordOutcome } from '../../proxy/jobs/item-queue.js';
import type { JobDb } from '../../proxy/jobs/job-db.js';
import type { JobStore } from '../../proxy/jobs/job-store.js';
import { JobWorker, type ItemExecutor } from '../../proxy/jobs/job-worker.js';
import type { ItemResult, JobItem, OutputLine } from '../../proxy/jobs/job-types.js';
import { SqliteJobBackend } from '../../proxy/jobs/sqlite-job-backend.js';
import { embeddingsJsonl, tempDb } from './job-test-kit.js';

const OWNER = 'acme';
const LEASE_MS = 60_000;

/**
 * A real SQLite backend whose next `failClaims` claims and `failRecords` records reject, as a
 * backend that lost its disk or its connection for a moment would; while `claimGate` is set, a
 * claim waits for it (a slow backend) and counts itself in `claimsWaiting`.
 */
class FlakyBackend extends SqliteJobBackend {
  failClaims = 0;
  failRecords = 0;
  claimGate: Promise<void> | null = null;
  claimsWaiting = 0;

  constructor(db: JobDb) {
    super(db);
  }

  override async claim(workerId: string, max: number, leaseMs: number): Promise<JobItem[]> {
    if (this.claimGate !== null) {
      this.claimsWaiting++;
      await this.claimGate;
    }
    if (this.failClaims > 0) {
      this.failClaims--;
      throw new Error('claim: connection lost');
    }
    return super.claim(workerId, max, leaseMs);
  }

  override async record(item: JobItem, result: ItemResult): Promise<RecordOutcome> {
    if (this.failRecords > 0) {
      this.failRecords--;
      throw new Error('record: disk I/O error');
    }
    return super.record(item, result);
  }
}

const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** An executor from a function, counting how many calls run at once. */
function executor(fn: (item: JobItem, signal: AbortSignal) => Promise<ItemResult>): ItemExecutor & {
  maxInFlight: number;
  calls: number;
} {
  let inFlight = 0;
  const ex = {
    maxInFlight: 0,
    calls: 0,
    async execute(item: JobItem, signal: AbortSignal): Promise<ItemResult> {
      ex.calls++;
      ex.maxInFlight = Math.max(ex.maxInFlight, ++inFlight);
      try {
        return await fn(item, signal);
      } finally {
        inFlight--;
      }
    },
  };
  return ex;
}

describe('job worker', () => {
  let env: ReturnType<typeof tempDb>;
  let backend: FlakyBackend;
  let store: JobStore;

  beforeEach(() => {
    env = tempDb();
    backend = new FlakyBackend(env.db);
    store = backend.store;
  });
  afterEach(() => env.cleanup());

  function batchOf(n: number): string {
    const file = store.createFile(OWNER, {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(n),
    });
    return store.createBatch(OWNER, {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    }).id;
  }

  function output(id: string): OutputLine[] {
    const b = store.getBatch(OWNER, id);
    return b.output_file_id === null
      ? []
      : store
          .fileContent(OWNER, b.output_file_id)
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l) as OutputLine);
  }

  it('runs every item under the concurrency cap and writes results in input order', async () => {
    const id = batchOf(60);
    const ex = executor(async (item) => {
      await delay((item.index * 7) % 5); // finish out of order
      return { status: 200, body: { echo: (JSON.parse(item.body) as { input: string }).input } };
    });
    const worker = new JobWorker(backend, ex, { concurrency: 5, pollMs: 10 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.ok(ex.maxInFlight <= 5, `max in flight ${ex.maxInFlight}`);
    assert.equal(ex.maxInFlight, 5);
    const batch = store.getBatch(OWNER, id);
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: 60, completed: 60, failed: 0 });
    const out = output(id);
    assert.equal(out.length, 60);
    out.forEach((l, i) => {
      assert.equal(l.custom_id, `req-${i}`);
      assert.deepEqual(l.response?.body, { echo: `text ${i}` });
    });
    assert.deepEqual(worker.stats, { started: 60, recorded: 60, duplicates: 0, retried: 0, storeErrors: 0 });
  });

  it('caps the start rate', async () => {
    batchOf(20);
    const ex = executor(async () => ({ status: 200, body: null }));
    const worker = new JobWorker(backend, ex, { concurrency: 2, ratePerSecond: 50, pollMs: 10 });
    const started = performance.now();
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    const elapsed = performance.now() - started;
    // Burst of 2, then 18 starts at 50/s: at least 360 ms.
    assert.ok(elapsed >= 330, `20 items at 50/s took ${elapsed.toFixed(0)} ms`);
    assert.equal(ex.calls, 20);
  });

  it('retries 429/5xx and rejections with backoff, keeps 4xx as results, gives up after maxAttempts', async () => {
    const id = batchOf(4);
    const seen = new Map<number, number>();
    const ex = executor(async (item) => {
      const n = (seen.get(item.index) ?? 0) + 1;
      seen.set(item.index, n);
      if (item.index === 0) return n < 3 ? { status: 503, body: 'busy' } : { status: 200, body: 'ok' };
      if (item.index === 1) return { status: 400, body: 'bad request' };
      if (item.index === 2) throw new Error('connection refused');
      return n === 1 ? { status: 429, body: 'slow down' } : { status: 200, body: 'ok' };
    });
    const worker = new JobWorker(backend, ex, { concurrency: 4, pollMs: 5, retryBaseMs: 5, maxAttempts: 3 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.deepEqual([...seen.entries()].sort(), [
      [0, 3],
      [1, 1],
      [2, 3],
      [3, 2],
    ]);
    const batch = store.getBatch(OWNER, id);
    assert.deepEqual(batch.request_counts, { total: 4, completed: 2, failed: 2 });
    const errors = store
      .fileContent(OWNER, batch.error_file_id!)
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as OutputLine);
    assert.deepEqual(
      errors.map((l) => [l.custom_id, l.response?.status_code ?? null, l.error?.message ?? null]),
      [
        ['req-1', 400, null],
        ['req-2', null, 'connection refused'],
      ],
    );
    assert.equal(worker.stats.retried, 5); // item 0 twice, item 2 twice, item 3 once
  });

  it('aborts running executions on stop and hands their items back at once', async () => {
    const id = batchOf(3);
    let aborted = 0;
    const hanging = executor(
      (_item, signal) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            aborted++;
            reject(new Error('aborted'));
          }),
        ),
    );
    const first = new JobWorker(backend, hanging, { concurrency: 3, pollMs: 5, leaseMs: LEASE_MS });
    first.start();
    while (hanging.calls < 3) await delay(5);
    await first.stop();
    assert.equal(aborted, 3);
    assert.equal(store.getBatch(OWNER, id).request_counts.completed, 0);
    // Claimable right away although the stopped worker's lease had a minute left.
    assert.equal((await backend.claim('probe', 3, 1)).length, 3);
    await delay(5);
    const second = new JobWorker(
      backend,
      executor(async () => ({ status: 200, body: 'late' })),
      { pollMs: 20 },
    );
    second.start();
    await second.whenIdle();
    await second.stop();
    assert.equal(store.getBatch(OWNER, id).status, 'completed');
    assert.equal(output(id).length, 3);
  });

  it('aborts the executions of a batch cancelled meanwhile, which then ends cancelled without them', async () => {
    const id = batchOf(2);
    let aborted = 0;
    // Items that wait as a tenant's rate limit makes them wait, until aborted.
    const waiting = executor(
      (_item, signal) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            aborted++;
            reject(new Error('aborted'));
          }),
        ),
    );
    const w = new JobWorker(backend, waiting, { concurrency: 2, pollMs: 10, leaseMs: LEASE_MS });
    w.start();
    try {
      while (waiting.calls < 2) await delay(5);
      assert.equal((await backend.cancelBatch(OWNER, id)).status, 'cancelling');
      const until = Date.now() + 3000;
      while (store.getBatch(OWNER, id).status !== 'cancelled' && Date.now() < until) await delay(10);
      const b = store.getBatch(OWNER, id);
      assert.equal(b.status, 'cancelled', 'the batch stayed cancelling while its items were held');
      assert.equal(aborted, 2);
      assert.equal(b.request_counts.completed, 0);
      assert.equal(waiting.calls, 2, 'a cancelled item ran again');
    } finally {
      await w.stop();
    }
  });

  it('gives items back at once, without running them, when stopped during a claim', async () => {
    const id = batchOf(3);
    let open = (): void => {};
    backend.claimGate = new Promise((resolve) => (open = resolve));
    const ex = executor(async () => ({ status: 200, body: null }));
    const worker = new JobWorker(backend, ex, { concurrency: 3, pollMs: 5, leaseMs: LEASE_MS });
    worker.start();
    const deadline = performance.now() + 5000;
    while (backend.claimsWaiting === 0) {
      assert.ok(performance.now() < deadline, 'the worker never claimed');
      await delay(5);
    }
    const stopped = worker.stop();
    backend.claimGate = null;
    open();
    await stopped;
    assert.equal(ex.calls, 0);
    assert.equal(worker.stats.started, 0);
    const again = await backend.claim('other', 10, LEASE_MS);
    assert.deepEqual(
      again.map((i) => [i.index, i.attempts]),
      [
        [0, 2],
        [1, 2],
        [2, 2],
      ],
      'runnable again without waiting for the lease',
    );
    assert.equal(store.getBatch(OWNER, id).request_counts.completed, 0);
  });

  it('hands each item the owner of its batch', async () => {
    const file = store.createFile('other', {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(2),
    });
    store.createBatch('other', {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    batchOf(2);
    const owners: string[] = [];
    const worker = new JobWorker(
      backend,
      executor(async (item) => {
        owners.push(`${item.owner}/${item.customId}`);
        return { status: 200, body: null };
      }),
      { concurrency: 1, pollMs: 5 },
    );
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.deepEqual(owners, ['other/req-0', 'other/req-1', `${OWNER}/req-0`, `${OWNER}/req-1`]);
  });

  it('reports failing backend calls and goes on; the lease expiry reruns the item whose result was lost', async () => {
    const id = batchOf(5);
    backend.failClaims = 2;
    backend.failRecords = 1;
    const errors: string[] = [];
    const ex = executor(async (item) => ({ status: 200, body: { n: item.index } }));
    const worker = new JobWorker(backend, ex, {
      concurrency: 2,
      pollMs: 5,
      leaseMs: 150,
      onError: (err) => errors.push(err instanceof Error ? err.message : String(err)),
    });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.deepEqual(errors, ['claim: connection lost', 'claim: connection lost', 'record: disk I/O error']);
    const batch = store.getBatch(OWNER, id);
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: 5, completed: 5, failed: 0 });
    assert.deepEqual(
      output(id).map((l) => [l.custom_id, l.response?.body]),
      [0, 1, 2, 3, 4].map((i) => [`req-${i}`, { n: i }]),
    );
    assert.equal(ex.calls, 6, 'the item whose record failed ran once more');
    assert.deepEqual(worker.stats, { started: 6, recorded: 5, duplicates: 0, retried: 0, storeErrors: 3 });
  });
});
