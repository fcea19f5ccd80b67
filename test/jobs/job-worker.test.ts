import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { JobStore } from '../../proxy/jobs/job-store.js';
import { JobWorker, type ItemExecutor } from '../../proxy/jobs/job-worker.js';
import type { ItemResult, JobItem, OutputLine } from '../../proxy/jobs/job-types.js';
import { embeddingsJsonl, tempDb } from './job-test-kit.js';

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
  let store: JobStore;

  beforeEach(() => {
    env = tempDb();
    store = new JobStore(env.db);
  });
  afterEach(() => env.cleanup());

  function batchOf(n: number): string {
    const file = store.createFile({ filename: 'in.jsonl', purpose: 'batch', content: embeddingsJsonl(n) });
    return store.createBatch({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' })
      .id;
  }

  function output(id: string): OutputLine[] {
    const b = store.getBatch(id);
    return b.output_file_id === null
      ? []
      : store
          .fileContent(b.output_file_id)
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l) as OutputLine);
  }

  it('runs every item under the concurrency cap and writes results in input order', async () => {
    const id = batchOf(60);
    const ex = executor(async (item) => {
      await delay((item.index * 7) % 5); // finish out of order
      return { status: 200, body: { echo: (item.body as { input: string }).input } };
    });
    const worker = new JobWorker(env.db, ex, { concurrency: 5, pollMs: 10 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.ok(ex.maxInFlight <= 5, `max in flight ${ex.maxInFlight}`);
    assert.equal(ex.maxInFlight, 5);
    const batch = store.getBatch(id);
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: 60, completed: 60, failed: 0 });
    const out = output(id);
    assert.equal(out.length, 60);
    out.forEach((l, i) => {
      assert.equal(l.custom_id, `req-${i}`);
      assert.deepEqual(l.response?.body, { echo: `text ${i}` });
    });
    assert.deepEqual(worker.stats, { started: 60, recorded: 60, duplicates: 0, retried: 0 });
  });

  it('caps the start rate', async () => {
    batchOf(20);
    const ex = executor(async () => ({ status: 200, body: null }));
    const worker = new JobWorker(env.db, ex, { concurrency: 2, ratePerSecond: 50, pollMs: 10 });
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
    const worker = new JobWorker(env.db, ex, { concurrency: 4, pollMs: 5, retryBaseMs: 5, maxAttempts: 3 });
    worker.start();
    await worker.whenIdle();
    await worker.stop();
    assert.deepEqual([...seen.entries()].sort(), [
      [0, 3],
      [1, 1],
      [2, 3],
      [3, 2],
    ]);
    const batch = store.getBatch(id);
    assert.deepEqual(batch.request_counts, { total: 4, completed: 2, failed: 2 });
    const errors = store
      .fileContent(batch.error_file_id!)
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

  it('aborts running executions on stop and leaves their items to another worker', async () => {
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
    const first = new JobWorker(env.db, hanging, { concurrency: 3, pollMs: 5, leaseMs: 200 });
    first.start();
    while (hanging.calls < 3) await delay(5);
    await first.stop();
    assert.equal(aborted, 3);
    assert.equal(store.getBatch(id).request_counts.completed, 0);
    const second = new JobWorker(
      env.db,
      executor(async () => ({ status: 200, body: 'late' })),
      { pollMs: 20 },
    );
    second.start();
    await second.whenIdle();
    await second.stop();
    assert.equal(store.getBatch(id).status, 'completed');
    assert.equal(output(id).length, 3);
  });
});
