import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { ItemQueue } from '../../proxy/jobs/item-queue.js';
import { JobError } from '../../proxy/jobs/job-errors.js';
import { JobStore } from '../../proxy/jobs/job-store.js';
import type { OutputLine } from '../../proxy/jobs/job-types.js';
import { embeddingLine, embeddingsJsonl, ManualClock, tempDb } from './job-test-kit.js';

const LEASE_MS = 60_000;
const OWNER = 'acme';

function lines(store: JobStore, fileId: string | null): OutputLine[] {
  assert.ok(fileId !== null, 'file id present');
  return store
    .fileContent(OWNER, fileId)
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as OutputLine);
}

describe('job store', () => {
  let env: ReturnType<typeof tempDb>;
  let clock: ManualClock;
  let store: JobStore;
  let queue: ItemQueue;

  beforeEach(() => {
    env = tempDb();
    clock = new ManualClock();
    store = new JobStore(env.db, { clock: clock.now });
    queue = new ItemQueue(env.db, clock.now);
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

  it('rejects an upload with a bad line, naming the line', () => {
    assert.throws(
      () =>
        store.createFile(OWNER, { filename: 'x', purpose: 'batch', content: `${embeddingLine(0)}\nnope\n` }),
      (err: unknown) => err instanceof JobError && err.line === 2 && err.kind.status === 400,
    );
    assert.throws(
      () => store.createFile(OWNER, { filename: 'x', purpose: 'fine-tune', content: embeddingLine(0) }),
      /purpose/,
    );
  });

  it('has every item on disk when create returns, visible to another connection', () => {
    const file = store.createFile(OWNER, {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(50),
    });
    assert.equal(file.object, 'file');
    assert.equal(file.bytes, Buffer.byteLength(embeddingsJsonl(50)));
    const batch = store.createBatch(OWNER, {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
      metadata: { job: 'nightly' },
    });
    assert.equal(batch.status, 'validating');
    assert.deepEqual(batch.request_counts, { total: 50, completed: 0, failed: 0 });
    assert.deepEqual(batch.metadata, { job: 'nightly' });
    assert.equal(batch.expires_at - batch.created_at, 86_400);
    const other = new Database(env.path, { readonly: true });
    const row = other.prepare('SELECT COUNT(*) AS n FROM job_items WHERE batch_id = ?').get(batch.id) as {
      n: number;
    };
    other.close();
    assert.equal(row.n, 50);
    assert.equal(store.fileContent(OWNER, file.id), embeddingsJsonl(50));
  });

  it('moves validating → in_progress → finalizing → completed, with counts and output in input order', () => {
    const id = batchOf(4);
    const items = queue.claim('w1', 10, LEASE_MS);
    assert.deepEqual(
      items.map((i) => [i.index, i.customId, i.attempts]),
      [
        [0, 'req-0', 1],
        [1, 'req-1', 1],
        [2, 'req-2', 1],
        [3, 'req-3', 1],
      ],
    );
    assert.ok(items.every((i) => i.owner === OWNER));
    assert.equal(store.getBatch(OWNER, id).status, 'in_progress');
    assert.ok(store.getBatch(OWNER, id).in_progress_at !== null);
    // Results arrive out of order; files must still be in input order.
    assert.equal(queue.record(items[3]!.id, { status: 200, body: { n: 3 } }), 'recorded');
    assert.equal(
      queue.record(items[1]!.id, { status: 400, body: { error: { message: 'bad' } } }),
      'recorded',
    );
    assert.equal(queue.record(items[0]!.id, { status: 200, body: { n: 0 } }), 'recorded');
    assert.deepEqual(store.getBatch(OWNER, id).request_counts, { total: 4, completed: 2, failed: 1 });
    assert.equal(queue.fail(items[2]!.id, { code: 'request_failed', message: 'ECONNRESET' }), 'last');
    const finalizing = store.getBatch(OWNER, id);
    assert.equal(finalizing.status, 'finalizing');
    assert.ok(finalizing.finalizing_at !== null);
    queue.finalize(id);
    const done = store.getBatch(OWNER, id);
    assert.equal(done.status, 'completed');
    assert.ok(done.completed_at !== null);
    assert.deepEqual(done.request_counts, { total: 4, completed: 2, failed: 2 });
    const out = lines(store, done.output_file_id);
    assert.deepEqual(
      out.map((l) => [l.custom_id, l.response?.status_code, l.response?.body]),
      [
        ['req-0', 200, { n: 0 }],
        ['req-3', 200, { n: 3 }],
      ],
    );
    const errors = lines(store, done.error_file_id);
    assert.deepEqual(
      errors.map((l) => [l.custom_id, l.response?.status_code ?? null, l.error?.code ?? null]),
      [
        ['req-1', 400, null],
        ['req-2', null, 'request_failed'],
      ],
    );
    assert.equal(
      store.getFile(OWNER, done.output_file_id!).bytes,
      Buffer.byteLength(store.fileContent(OWNER, done.output_file_id!)),
    );
    assert.equal(store.getFile(OWNER, done.output_file_id!).purpose, 'batch_output');
  });

  it('writes a result once even when the item ran twice', () => {
    const id = batchOf(2);
    const [first] = queue.claim('w1', 1, 1000);
    assert.ok(first !== undefined);
    clock.advance(1001); // lease expired: another worker takes the same item
    const [again] = queue.claim('w2', 1, 1000);
    assert.equal(again?.id, first.id);
    assert.equal(again?.attempts, 2);
    assert.equal(queue.record(again.id, { status: 200, body: 'second' }), 'recorded');
    assert.equal(queue.record(first.id, { status: 200, body: 'first' }), 'duplicate');
    assert.deepEqual(store.getBatch(OWNER, id).request_counts, { total: 2, completed: 1, failed: 0 });
  });

  it('fails a batch whose lines target another endpoint, with the line numbers', () => {
    const content = `${embeddingLine(0)}\n${embeddingLine(1, '/v1/chat/completions')}\n`;
    const file = store.createFile(OWNER, { filename: 'in.jsonl', purpose: 'batch', content });
    const batch = store.createBatch(OWNER, {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    assert.equal(batch.status, 'failed');
    assert.ok(batch.failed_at !== null);
    assert.deepEqual(
      batch.errors?.data.map((e) => [e.code, e.line]),
      [['mismatched_endpoint', 2]],
    );
    assert.deepEqual(queue.claim('w1', 10, LEASE_MS), []);
  });

  it('rejects unknown ids, endpoints and windows with the right status', () => {
    const status = (fn: () => unknown): number | null => {
      try {
        fn();
        return null;
      } catch (err) {
        return err instanceof JobError ? err.kind.status : -1;
      }
    };
    const file = store.createFile(OWNER, {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(1),
    });
    assert.equal(
      status(() => store.getBatch(OWNER, 'batch_nope')),
      404,
    );
    assert.equal(
      status(() => store.getFile(OWNER, 'file-nope')),
      404,
    );
    assert.equal(
      status(() =>
        store.createBatch(OWNER, {
          input_file_id: 'file-nope',
          endpoint: '/v1/embeddings',
          completion_window: '24h',
        }),
      ),
      404,
    );
    assert.equal(
      status(() =>
        store.createBatch(OWNER, {
          input_file_id: file.id,
          endpoint: '/v1/images',
          completion_window: '24h',
        }),
      ),
      400,
    );
    assert.equal(
      status(() =>
        store.createBatch(OWNER, {
          input_file_id: file.id,
          endpoint: '/v1/embeddings',
          completion_window: '1h',
        }),
      ),
      400,
    );
  });

  it('cancels at once when nothing is in flight', () => {
    const id = batchOf(3);
    const cancelled = store.cancelBatch(OWNER, id);
    assert.equal(cancelled.status, 'cancelled');
    assert.ok(cancelled.cancelling_at !== null && cancelled.cancelled_at !== null);
    assert.deepEqual(cancelled.request_counts, { total: 3, completed: 0, failed: 3 });
    assert.equal(cancelled.output_file_id, null);
    assert.deepEqual(
      lines(store, cancelled.error_file_id).map((l) => [l.custom_id, l.error?.code]),
      [
        ['req-0', 'batch_cancelled'],
        ['req-1', 'batch_cancelled'],
        ['req-2', 'batch_cancelled'],
      ],
    );
    assert.throws(
      () => store.cancelBatch(OWNER, id),
      (err: unknown) => err instanceof JobError && err.kind.status === 409,
    );
  });

  it('stays cancelling while an item is in flight, keeps its result, then ends cancelled', () => {
    const id = batchOf(3);
    const [running] = queue.claim('w1', 1, LEASE_MS);
    assert.ok(running !== undefined);
    assert.equal(store.cancelBatch(OWNER, id).status, 'cancelling');
    assert.equal(store.cancelBatch(OWNER, id).status, 'cancelling', 'a second cancel is harmless');
    assert.deepEqual(queue.claim('w2', 10, LEASE_MS), [], 'nothing more is handed out');
    queue.record(running.id, { status: 200, body: { ok: true } });
    const done = store.getBatch(OWNER, id);
    assert.equal(done.status, 'cancelled');
    assert.deepEqual(done.request_counts, { total: 3, completed: 1, failed: 2 });
    assert.deepEqual(
      lines(store, done.output_file_id).map((l) => l.custom_id),
      ['req-0'],
    );
  });

  it('ends a cancelling batch whose worker died once the lease runs out', () => {
    const id = batchOf(2);
    queue.claim('dead', 1, 1000);
    assert.equal(store.cancelBatch(OWNER, id).status, 'cancelling');
    clock.advance(1001);
    queue.sweep(3);
    assert.equal(store.getBatch(OWNER, id).status, 'cancelled');
    assert.deepEqual(store.getBatch(OWNER, id).request_counts, { total: 2, completed: 0, failed: 2 });
  });

  it('expires a batch past its window and discards late results', () => {
    const id = batchOf(3);
    const [running] = queue.claim('w1', 1, LEASE_MS);
    queue.record(running!.id, { status: 200, body: 1 });
    const [late] = queue.claim('w1', 1, LEASE_MS);
    clock.advance(86_400_000);
    queue.sweep(3);
    const expired = store.getBatch(OWNER, id);
    assert.equal(expired.status, 'expired');
    assert.ok(expired.expired_at !== null);
    assert.deepEqual(expired.request_counts, { total: 3, completed: 1, failed: 2 });
    assert.equal(queue.record(late!.id, { status: 200, body: 2 }), 'duplicate');
    assert.deepEqual(
      lines(store, expired.error_file_id).map((l) => [l.custom_id, l.error?.code]),
      [
        ['req-1', 'batch_expired'],
        ['req-2', 'batch_expired'],
      ],
    );
  });

  it('fails an item whose attempts are used up instead of running it forever', () => {
    const id = batchOf(1);
    for (let i = 0; i < 3; i++) {
      assert.equal(queue.claim(`w${i}`, 1, 1000).length, 1);
      clock.advance(1001);
    }
    queue.sweep(3);
    const done = store.getBatch(OWNER, id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(
      lines(store, done.error_file_id).map((l) => l.error?.code),
      ['max_attempts_exceeded'],
    );
  });

  it('lists batches newest first with a cursor', () => {
    const ids = [batchOf(1), batchOf(1), batchOf(1)];
    const page1 = store.listBatches(OWNER, { limit: 2 });
    assert.deepEqual(
      page1.data.map((b) => b.id),
      [ids[2], ids[1]],
    );
    assert.equal(page1.has_more, true);
    const page2 = store.listBatches(OWNER, { limit: 2, after: page1.last_id! });
    assert.deepEqual(
      page2.data.map((b) => b.id),
      [ids[0]],
    );
    assert.equal(page2.has_more, false);
  });
});
