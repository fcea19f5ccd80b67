/**
 * Shared helpers of the job tests: a temp dir, a database in one, JSONL builders and a manual wall
 * clock.
 */

import { ManualClock as SharedManualClock } from '../helpers/manual-clock.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openJobDb, type JobDb } from '../../proxy/jobs/job-db.js';

/** A fresh temp dir and the path of a job database in it (not created); `cleanup()` removes the dir. */
export function tempDir(): { path: string; dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-jobs-'));
  return { path: join(dir, 'jobs.db'), dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A job database in its own temp dir; `cleanup()` closes it and removes the dir. */
export function tempDb(): { db: JobDb; path: string; dir: string; cleanup: () => void } {
  const { dir, path } = tempDir();
  const db = openJobDb(path);
  return {
    db,
    path,
    dir,
    cleanup: () => {
      if (db.open) db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One embeddings request line for input `i`: custom_id `req-i`, input `text i`. */
export function embeddingLine(i: number, url = '/v1/embeddings'): string {
  return JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url,
    body: { model: 'sim-embed', input: `text ${i}` },
  });
}

/** A JSONL file of `n` embeddings requests. */
export function embeddingsJsonl(n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += embeddingLine(i) + '\n';
  return out;
}

/** The shared manual clock, started at a wall-clock instant (the job stores keep epoch times). */
export class ManualClock extends SharedManualClock {
  constructor(startMs = Date.UTC(2025, 0, 1)) {
    super(startMs);
  }
}
