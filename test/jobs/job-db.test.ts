import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { ItemQueue } from '../../proxy/jobs/item-queue.js';
import { openJobDb } from '../../proxy/jobs/job-db.js';
import { JobStore } from '../../proxy/jobs/job-store.js';
import { embeddingsJsonl, tempDir } from './job-test-kit.js';

/** The tables as schema version 1 wrote them: no owners, files without a listing order. */
const V1_SCHEMA = `
CREATE TABLE job_files (
  id TEXT PRIMARY KEY, purpose TEXT NOT NULL, filename TEXT NOT NULL, bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL, content BLOB, batch_id TEXT, kind TEXT NOT NULL);
CREATE TABLE job_batches (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, endpoint TEXT NOT NULL, input_file_id TEXT NOT NULL,
  completion_window TEXT NOT NULL, status TEXT NOT NULL, errors TEXT, metadata TEXT, output_file_id TEXT,
  error_file_id TEXT, total INTEGER NOT NULL, completed INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, in_progress_at INTEGER,
  expires_at INTEGER NOT NULL, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,
  expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER);
CREATE TABLE job_items (
  id INTEGER PRIMARY KEY, batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL,
  method TEXT NOT NULL, url TEXT NOT NULL, body TEXT NOT NULL, state TEXT NOT NULL, lease_owner TEXT,
  lease_until INTEGER, attempts INTEGER NOT NULL DEFAULT 0, outcome TEXT, status_code INTEGER,
  response TEXT, error_code TEXT, error_message TEXT, finished_at INTEGER,
  UNIQUE (batch_id, idx), UNIQUE (batch_id, custom_id));
`;

describe('job database', () => {
  let env: ReturnType<typeof tempDir>;
  beforeEach(() => {
    env = tempDir();
  });
  afterEach(() => env.cleanup());

  it('migrates a version 1 file in place: old files and batches belong to the empty owner', () => {
    const old = new Database(env.path);
    old.exec(V1_SCHEMA);
    const content = embeddingsJsonl(2);
    const insertFile = old.prepare(
      `INSERT INTO job_files (id, purpose, filename, bytes, created_at, content, batch_id, kind)
       VALUES (?, 'batch', 'in.jsonl', ?, 1700000000, ?, NULL, 'upload')`,
    );
    insertFile.run('file-old1', content.length, Buffer.from(content));
    insertFile.run('file-old2', content.length, Buffer.from(content));
    old
      .prepare(
        `INSERT INTO job_batches (id, seq, endpoint, input_file_id, completion_window, status, total, created_at, expires_at)
         VALUES ('batch_old', 1, '/v1/embeddings', 'file-old1', '24h', 'validating', 2, 1700000000, 4102444800)`,
      )
      .run();
    const insertItem = old.prepare(
      `INSERT INTO job_items (batch_id, idx, custom_id, method, url, body, state)
       VALUES ('batch_old', ?, ?, 'POST', '/v1/embeddings', '{}', 'pending')`,
    );
    insertItem.run(0, 'req-0');
    insertItem.run(1, 'req-1');
    old.pragma('user_version = 1');
    old.close();

    const db = openJobDb(env.path);
    try {
      assert.equal(db.pragma('user_version', { simple: true }), 3);
      const store = new JobStore(db);
      assert.deepEqual(
        store.listFiles('').data.map((f) => f.id),
        ['file-old2', 'file-old1'],
        'listed newest first in their original order',
      );
      assert.equal(store.fileContent('', 'file-old1'), content);
      assert.equal(store.getBatch('', 'batch_old').status, 'validating');
      assert.deepEqual(store.listBatches('tenant-a').data, [], 'no tenant sees the old rows');
      const items = new ItemQueue(db).claim('w1', 10, 60_000);
      assert.deepEqual(
        items.map((i) => [i.customId, i.owner, i.host, i.headers]),
        [
          ['req-0', '', 'localhost', []],
          ['req-1', '', 'localhost', []],
        ],
      );
      const fresh = store.createFile('', { filename: 'new.jsonl', purpose: 'batch', content });
      assert.equal(store.listFiles('', { limit: 1 }).data[0]?.id, fresh.id, 'new files list after old ones');
    } finally {
      db.close();
    }
    const reopened = openJobDb(env.path);
    assert.equal(new JobStore(reopened).listFiles('').data.length, 3, 'opening again changes nothing');
    reopened.close();
  });

  it('migrates a version 2 file in place: old batches run as localhost without headers, deleted files are cursors', () => {
    const old = new Database(env.path);
    // Version 2 is version 1 plus owners and the file order.
    old.exec(V1_SCHEMA);
    old.exec(`ALTER TABLE job_files ADD COLUMN owner TEXT NOT NULL DEFAULT '';
      ALTER TABLE job_files ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE job_batches ADD COLUMN owner TEXT NOT NULL DEFAULT '';`);
    const content = embeddingsJsonl(1);
    const insertFile = old.prepare(
      `INSERT INTO job_files (id, owner, seq, purpose, filename, bytes, created_at, content, batch_id, kind)
       VALUES (?, 'acme', ?, 'batch', 'in.jsonl', ?, 1700000000, ?, NULL, 'upload')`,
    );
    for (let i = 1; i <= 3; i++) insertFile.run(`file-v2-${i}`, i, content.length, Buffer.from(content));
    old
      .prepare(
        `INSERT INTO job_batches (id, owner, seq, endpoint, input_file_id, completion_window, status, total, created_at, expires_at)
         VALUES ('batch_v2', 'acme', 1, '/v1/embeddings', 'file-v2-1', '24h', 'validating', 1, 1700000000, 4102444800)`,
      )
      .run();
    old
      .prepare(
        `INSERT INTO job_items (batch_id, idx, custom_id, method, url, body, state)
         VALUES ('batch_v2', 0, 'req-0', 'POST', '/v1/embeddings', '{}', 'pending')`,
      )
      .run();
    old.pragma('user_version = 2');
    old.close();

    const db = openJobDb(env.path);
    try {
      assert.equal(db.pragma('user_version', { simple: true }), 3);
      const store = new JobStore(db);
      const batch = store.getBatch('acme', 'batch_v2');
      assert.equal(batch.status, 'validating');
      assert.equal(
        'host' in batch || 'headers' in batch,
        false,
        'the origin is not part of the batch object',
      );
      const [item] = new ItemQueue(db).claim('w1', 1, 60_000);
      assert.deepEqual([item?.owner, item?.host, item?.headers], ['acme', 'localhost', []]);
      store.deleteFile('acme', 'file-v2-3');
      assert.deepEqual(
        store.listFiles('acme', { after: 'file-v2-3' }).data.map((f) => f.id),
        ['file-v2-2', 'file-v2-1'],
      );
      const fresh = store.createFile('acme', { filename: 'new.jsonl', purpose: 'batch', content });
      assert.deepEqual(
        store.listFiles('acme').data.map((f) => f.id),
        [fresh.id, 'file-v2-2', 'file-v2-1'],
        'a file made after a delete lists first',
      );
      assert.deepEqual(store.listFiles('acme', { after: 'file-v2-3' }).data.length, 2);
    } finally {
      db.close();
    }
  });

  it('refuses a file written by a newer schema and leaves it untouched', () => {
    const newer = new Database(env.path);
    newer.pragma('user_version = 4');
    newer.close();
    assert.throws(() => openJobDb(env.path), /version 4 is newer than 3/);
    const check = new Database(env.path, { readonly: true });
    assert.equal(check.pragma('user_version', { simple: true }), 4);
    assert.equal(
      check.prepare("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").pluck().get(),
      0,
      'no table was created',
    );
    check.close();
  });
});
