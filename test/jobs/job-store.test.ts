/**
 * What only the SQLite store promises beyond the shared backend suite (`backend-conformance.ts`,
 * run for SQLite by `sqlite-job-backend.test.ts`): a batch and all its items are on disk, visible
 * to another connection, when `createBatch` returns; a deleted file's list place is pruned after
 * its TTL.
 */
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { JobError } from '../../proxy/jobs/job-errors.js';
import { JobStore } from '../../proxy/jobs/job-store.js';
import { DELETED_FILE_CURSOR_TTL_MS } from '../../proxy/jobs/list-page.js';
import { embeddingsJsonl, ManualClock, tempDb } from './job-test-kit.js';

const OWNER = 'acme';

describe('job store', () => {
  let env: ReturnType<typeof tempDb>;
  let store: JobStore;
  let clock: ManualClock;

  beforeEach(() => {
    env = tempDb();
    clock = new ManualClock();
    store = new JobStore(env.db, { clock: clock.now });
  });
  afterEach(() => env.cleanup());

  it('has every item on disk when create returns, visible to another connection', () => {
    const file = store.createFile(OWNER, {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(50),
    });
    const batch = store.createBatch(OWNER, {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    assert.equal(batch.status, 'validating');
    assert.deepEqual(batch.request_counts, { total: 50, completed: 0, failed: 0 });
    const other = new Database(env.path, { readonly: true });
    const rows = other
      .prepare('SELECT idx, custom_id FROM job_items WHERE batch_id = ? ORDER BY idx')
      .all(batch.id) as { idx: number; custom_id: string }[];
    other.close();
    assert.deepEqual(
      rows,
      Array.from({ length: 50 }, (_, i) => ({ idx: i, custom_id: `req-${i}` })),
    );
  });

  it("keeps a deleted file's list place for DELETED_FILE_CURSOR_TTL_MS, then prunes it", () => {
    const upload = (): string =>
      store.createFile(OWNER, { filename: 'in.jsonl', purpose: 'batch', content: embeddingsJsonl(1) }).id;
    const [older, gone] = [upload(), upload()];
    store.deleteFile(OWNER, gone);
    const tombstones = (): number =>
      env.db.prepare('SELECT COUNT(*) FROM job_file_tombstones').pluck().get() as number;
    assert.equal(tombstones(), 1);
    clock.advance(DELETED_FILE_CURSOR_TTL_MS - 1);
    assert.deepEqual(
      store.listFiles(OWNER, { after: gone }).data.map((f) => f.id),
      [older],
    );
    clock.advance(1);
    assert.throws(
      () => store.listFiles(OWNER, { after: gone }),
      (err: unknown) => err instanceof JobError && err.kind.status === 400 && err.param === 'after',
    );
    store.deleteFile(OWNER, older);
    assert.equal(tombstones(), 1, 'the next delete pruned the expired place');
  });
});
