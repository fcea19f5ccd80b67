/**
 * Opens the SQLite file that holds batch files, batches, their items and idempotency keys, sets the
 * durability pragmas and creates the schema. It owns the schema and nothing else: queries live with
 * the store that runs them.
 */

import type Database from 'better-sqlite3';
import { sqlitePackage } from '../runtime/optional-modules.js';

/** A better-sqlite3 connection as the job stores use it. */
export type JobDb = Database.Database;

/**
 * How hard a commit is pushed to disk. Both survive kill -9 of the process (a committed transaction
 * is in the WAL file before `commit` returns); `full` also survives an OS crash or power loss
 * (the WAL is fsynced at every commit), `normal` may lose the last commits then (fsync only at
 * checkpoints) but never corrupts the file.
 */
export const JobDurability = { full: 'full', normal: 'normal' } as const;
export type JobDurability = (typeof JobDurability)[keyof typeof JobDurability];

/** Options of `openJobDb`. */
export interface JobDbOptions {
  /** Default `full`: an acknowledged batch survives a power loss. */
  durability?: JobDurability;
  /** How long a writer waits for another process's lock before failing, ms. Default 5000. */
  busyTimeoutMs?: number;
}

/**
 * Bump when the schema changes; `openJobDb` refuses files from a newer version and migrates older
 * ones in place. 2: `owner` on files and batches, `seq` on files (listing order). 3: `host` and
 * `headers` on batches (what routes match, replayed on each item), `job_file_tombstones` (the
 * listing position of deleted files, so a list cursor naming one goes on after it).
 */
const SCHEMA_VERSION = 3;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS job_files (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL DEFAULT '', -- tenant; '' without tenants
  seq INTEGER NOT NULL DEFAULT 0, -- creation order, for listing
  purpose TEXT NOT NULL,
  filename TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL,   -- s since the epoch
  content BLOB,                  -- uploads only; output and error files are rendered from items
  batch_id TEXT,                 -- output and error files: the batch they belong to
  kind TEXT NOT NULL             -- upload | output | error
);
CREATE TABLE IF NOT EXISTS job_batches (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL DEFAULT '', -- tenant; '' without tenants
  seq INTEGER NOT NULL UNIQUE,   -- creation order, for listing
  endpoint TEXT NOT NULL,
  input_file_id TEXT NOT NULL,
  completion_window TEXT NOT NULL,
  status TEXT NOT NULL,
  errors TEXT,                   -- JSON list of validation errors, when failed
  metadata TEXT,                 -- JSON object or NULL
  output_file_id TEXT,
  error_file_id TEXT,
  total INTEGER NOT NULL,
  completed INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,   -- s; every *_at column is seconds since the epoch
  in_progress_at INTEGER, expires_at INTEGER NOT NULL, finalizing_at INTEGER, completed_at INTEGER,
  failed_at INTEGER, expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
  host TEXT,                     -- Host of the creating request, lower-case, no port; NULL: localhost
  headers TEXT                   -- JSON flat [name, value, ...] of its route-matched headers, or NULL
);
CREATE TABLE IF NOT EXISTS job_items (
  id INTEGER PRIMARY KEY,
  batch_id TEXT NOT NULL,
  idx INTEGER NOT NULL,          -- 0-based input line
  custom_id TEXT NOT NULL,
  method TEXT NOT NULL,
  url TEXT NOT NULL,
  body TEXT NOT NULL,            -- JSON request body
  state TEXT NOT NULL,           -- pending | leased | done
  lease_owner TEXT,
  lease_until INTEGER,           -- ms since the epoch; also the retry time after a failed attempt
  attempts INTEGER NOT NULL DEFAULT 0,
  outcome TEXT,                  -- completed | failed, once done
  status_code INTEGER,
  response TEXT,                 -- JSON response body
  error_code TEXT,
  error_message TEXT,
  finished_at INTEGER,           -- ms since the epoch
  UNIQUE (batch_id, idx),
  UNIQUE (batch_id, custom_id)
);
CREATE INDEX IF NOT EXISTS job_files_owner ON job_files (owner, seq);
CREATE INDEX IF NOT EXISTS job_files_seq ON job_files (seq);
CREATE INDEX IF NOT EXISTS job_batches_owner ON job_batches (owner, seq);
CREATE INDEX IF NOT EXISTS job_batches_input ON job_batches (input_file_id);
CREATE TABLE IF NOT EXISTS job_file_tombstones (
  id TEXT PRIMARY KEY,           -- a deleted file's id
  owner TEXT NOT NULL,
  seq INTEGER NOT NULL,          -- its place in the listing order
  deleted_at INTEGER NOT NULL    -- ms since the epoch; dropped DELETED_FILE_CURSOR_TTL_MS later
);
CREATE INDEX IF NOT EXISTS job_file_tombstones_deleted ON job_file_tombstones (deleted_at);
CREATE INDEX IF NOT EXISTS job_items_claim ON job_items (state, id);
CREATE INDEX IF NOT EXISTS job_items_outcome ON job_items (batch_id, outcome, idx);
CREATE TABLE IF NOT EXISTS idempotency_keys (
  key TEXT PRIMARY KEY,
  request_hash TEXT NOT NULL,
  state TEXT NOT NULL,           -- in-progress | done
  response TEXT,                 -- JSON StoredResponse once done
  expires_at INTEGER NOT NULL    -- ms since the epoch
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);
`;

/**
 * Brings a version 1 file to version 2. Existing files and batches get owner '' (they were made
 * before tenants were recorded); files get `seq` in rowid order, which is their insertion order.
 */
const MIGRATE_1_TO_2 = `
ALTER TABLE job_files ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE job_files ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE job_files SET seq = rowid;
ALTER TABLE job_batches ADD COLUMN owner TEXT NOT NULL DEFAULT '';
`;

/**
 * Brings a version 2 file to version 3: batches made before get no host or headers (their items run
 * as `localhost` without client headers, as they did); the tombstone table is created by `SCHEMA`.
 */
const MIGRATE_2_TO_3 = `
ALTER TABLE job_batches ADD COLUMN host TEXT;
ALTER TABLE job_batches ADD COLUMN headers TEXT;
`;

/**
 * Opens (creating when missing) the job database at `path` in WAL mode and brings its schema up to
 * date (a version 1 or 2 file is migrated in place, in the same transaction). Several processes may open
 * the same file; writes are serialised by SQLite. Throws when the file was written by a newer schema.
 *
 * @example
 * const db = openJobDb('/var/lib/sluice/jobs.db');
 */
export function openJobDb(path: string, opts: JobDbOptions = {}): JobDb {
  const Sqlite = sqlitePackage();
  const db = new Sqlite(path);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${opts.durability === 'normal' ? 'NORMAL' : 'FULL'}`);
    db.pragma(`busy_timeout = ${opts.busyTimeoutMs ?? 5000}`);
    db.pragma('foreign_keys = ON');
    // Read the version under the write lock so two processes opening an old file migrate it once.
    db.transaction(() => {
      const version = db.pragma('user_version', { simple: true }) as number;
      if (version > SCHEMA_VERSION) {
        throw new Error(`${path}: job schema version ${version} is newer than ${SCHEMA_VERSION}`);
      }
      if (version === 1) db.exec(MIGRATE_1_TO_2);
      if (version === 1 || version === 2) db.exec(MIGRATE_2_TO_3);
      db.exec(SCHEMA);
      db.pragma(`user_version = ${SCHEMA_VERSION}`);
    }).immediate();
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}
