/**
 * What only the SQLite store promises beyond the shared backend suite (`backend-conformance.ts`,
 * run for SQLite by `sqlite-job-backend.test.ts`): a batch and all its items are on disk, visible
 * to another connection, when `createBatch` returns.
 */
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { JobStore } from '../../proxy/jobs/job-store.js';
import { embeddingsJsonl, ManualClock, tempDb } from './job-test-kit.js';

const OWNER = 'acme';

describe('job store', () => {
  let env: ReturnType<typeof tempDb>;
  let store: JobStore;

  beforeEach(() => {
    env = tempDb();
    store = new JobStore(env.db, { clock: new ManualClock().now });
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
});
