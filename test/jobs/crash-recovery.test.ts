import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { JobStore } from '../../proxy/jobs/job-store.js';
import type { OutputLine } from '../../proxy/jobs/job-types.js';
import { embeddingsJsonl, tempDb } from './job-test-kit.js';

const ITEMS = 2000;
const DIM = 64; // embedding_dim of the `fast` profile
const OWNER = 'acme';
const WORKER = fileURLToPath(new URL('./fixtures/run-worker.js', import.meta.url));

interface Child {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function startWorker(dbPath: string, url: string, id: string): Child {
  const proc = spawn(process.execPath, [WORKER, dbPath, url, id], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return { proc, output: () => out, exited };
}

async function until(what: string, deadlineMs: number, check: () => boolean): Promise<void> {
  const deadline = performance.now() + deadlineMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('crash recovery', () => {
  let fleet: SimFleet;
  before(async () => {
    fleet = await startSimFleet({ nodes: 1, profile: 'fast' });
  });
  after(() => fleet?.close());

  it('finishes a 2,000-item batch after kill -9, each result exactly once and in input order', async (t) => {
    const env = tempDb();
    const children: Child[] = [];
    t.after(() => {
      for (const c of children) if (c.proc.exitCode === null) c.proc.kill('SIGKILL');
      env.cleanup();
    });
    const store = new JobStore(env.db);
    const file = store.createFile(OWNER, {
      filename: 'crash.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(ITEMS),
    });
    const { id } = store.createBatch(OWNER, {
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    const url = fleet.urls[0]!;
    const started = performance.now();

    const first = startWorker(env.path, url, 'first');
    children.push(first);
    await until(
      'a quarter of the results',
      15_000,
      () => store.getBatch(OWNER, id).request_counts.completed >= ITEMS / 4,
    );
    first.proc.kill('SIGKILL');
    assert.equal(await first.exited, null, `killed by a signal; output: ${first.output()}`);
    const atKill = store.getBatch(OWNER, id);
    const leased = env.db.prepare("SELECT COUNT(*) AS n FROM job_items WHERE state = 'leased'").get() as {
      n: number;
    };
    assert.equal(atKill.status, 'in_progress');
    assert.ok(atKill.request_counts.completed < ITEMS, 'killed mid-way');

    const second = startWorker(env.path, url, 'second');
    children.push(second);
    // About 10 s on a quiet two-core machine; the margin is for a loaded one (the file's own limit is
    // the runner's per-file timeout).
    const hung = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 90_000).unref());
    assert.equal(await Promise.race([second.exited, hung]), 0, `second worker output: ${second.output()}`);
    const elapsed = performance.now() - started;

    const batch = store.getBatch(OWNER, id);
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: ITEMS, completed: ITEMS, failed: 0 });
    assert.equal(batch.error_file_id, null);
    const lines = store
      .fileContent(OWNER, batch.output_file_id!)
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as OutputLine);
    assert.equal(lines.length, ITEMS);
    assert.equal(new Set(lines.map((l) => l.custom_id)).size, ITEMS, 'no custom_id twice');
    assert.equal(new Set(lines.map((l) => l.id)).size, ITEMS, 'no item twice');
    lines.forEach((line, i) => {
      assert.equal(line.custom_id, `req-${i}`);
      assert.equal(line.response?.status_code, 200);
      const body = line.response?.body as { data: { embedding: number[] }[] };
      assert.deepEqual(
        body.data[0]?.embedding,
        expectedEmbedding(`text ${i}`, DIM),
        `result ${i} belongs to input ${i}`,
      );
    });
    const reran = env.db.prepare('SELECT COUNT(*) AS n FROM job_items WHERE attempts > 1').get() as {
      n: number;
    };
    const stats = JSON.parse(second.output().trim().split('\n').at(-1) ?? '{}') as { recorded: number };
    assert.equal(
      atKill.request_counts.completed + stats.recorded,
      ITEMS,
      'the second worker wrote exactly the rest',
    );
    t.diagnostic(
      `killed at ${atKill.request_counts.completed}/${ITEMS} results with ${leased.n} items leased; ` +
        `${reran.n} items claimed again after the kill; second worker recorded ${stats.recorded}; total ${elapsed.toFixed(0)} ms`,
    );
  });
});
