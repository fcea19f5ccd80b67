import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from 'redis';
import { request } from 'undici';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { JobError } from '../../proxy/jobs/job-errors.js';
import { JobWorker, type ItemExecutor } from '../../proxy/jobs/job-worker.js';
import type { JobItem, OutputLine } from '../../proxy/jobs/job-types.js';
import { createRedisJobBackend, type RedisJobBackend } from '../../proxy/jobs/redis-job-backend.js';
import { redisSkip, settlesWithin, startRedis, type TestRedis } from '../helpers/redis.js';
import { CONFORMANCE_COMPLETION_WINDOWS, describeJobBackend } from './backend-conformance.js';
import { embeddingsJsonl } from './job-test-kit.js';

const DIM = 64; // embedding_dim of the `fast` profile
const EMBEDDINGS = '/v1/embeddings';

let redis: TestRedis | null = null;
let prefixes = 0;

/** The file's Redis server, started on first use. */
async function server(): Promise<TestRedis> {
  redis ??= await startRedis();
  return redis;
}

after(async () => {
  await redis?.stop();
});

function rawClient(url: string) {
  return createClient({ url });
}

/** Runs `fn` with a plain client on the test server. */
async function withRaw<T>(fn: (raw: ReturnType<typeof rawClient>) => Promise<T>): Promise<T> {
  const raw = rawClient((await server()).url);
  await raw.connect();
  try {
    return await fn(raw);
  } finally {
    raw.destroy();
  }
}

/** Deletes every key under `prefix`. */
async function dropPrefix(prefix: string): Promise<void> {
  await withRaw(async (raw) => {
    for await (const keys of raw.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      if (keys.length > 0) await raw.sendCommand(['DEL', ...keys]);
    }
  });
}

describeJobBackend(
  'redis',
  async () => {
    const prefix = `conf-${++prefixes}:`;
    const backend = await createRedisJobBackend({
      url: (await server()).url,
      prefix,
      completionWindows: CONFORMANCE_COMPLETION_WINDOWS,
    });
    return {
      backend,
      cleanup: async () => {
        await backend.close();
        await dropPrefix(prefix);
      },
    };
  },
  { skip: redisSkip() },
);

/** Polls `check` until it holds, failing after `ms`. */
async function until(what: string, ms: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** An executor POSTing each item to a simulated node with undici, noting who ran what. */
function nodeExecutor(baseUrl: string): ItemExecutor & { runs: JobItem[] } {
  const runs: JobItem[] = [];
  return {
    runs,
    async execute(item, signal) {
      runs.push(item);
      const res = await request(baseUrl + item.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: item.body,
        signal,
      });
      return { status: res.statusCode, body: await res.body.json() };
    },
  };
}

function parseLines(content: string): OutputLine[] {
  return content
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as OutputLine);
}

describe('redis job backend, several instances', { skip: redisSkip() }, () => {
  let fleet: SimFleet;
  const open: RedisJobBackend[] = [];
  let prefix = '';

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, profile: 'fast' });
  });
  after(() => fleet?.close());
  afterEach(async () => {
    for (const b of open.splice(0)) await b.close();
    await dropPrefix(prefix);
  });

  /** A backend on its own connection, as one Sluice instance would have. */
  async function instance(
    opts: { chunkSize?: number; completionWindows?: Record<string, number> } = {},
  ): Promise<RedisJobBackend> {
    const backend = await createRedisJobBackend({ url: (await server()).url, prefix, ...opts });
    open.push(backend);
    return backend;
  }

  async function batchOf(backend: RedisJobBackend, n: number, window = '24h'): Promise<string> {
    const file = await backend.createFile('acme', {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(n),
    });
    const batch = await backend.createBatch('acme', {
      input_file_id: file.id,
      endpoint: EMBEDDINGS,
      completion_window: window,
    });
    return batch.id;
  }

  it(
    'lets two instances drain one 600-item batch, each result once and in input order',
    { timeout: 60_000 },
    async () => {
      prefix = `multi-${++prefixes}:`;
      const ITEMS = 600;
      const a = await instance({ chunkSize: 64 });
      const b = await instance({ chunkSize: 64 });
      const id = await batchOf(a, ITEMS);
      const url = fleet.urls[0]!;
      const errors: unknown[] = [];
      const opts = { concurrency: 8, pollMs: 10, leaseMs: 30_000, onError: (e: unknown) => errors.push(e) };
      const exA = nodeExecutor(url);
      const exB = nodeExecutor(url);
      const workerA = new JobWorker(a, exA, { ...opts, workerId: 'instance-a' });
      const workerB = new JobWorker(b, exB, { ...opts, workerId: 'instance-b' });
      workerA.start();
      workerB.start();
      await Promise.all([workerA.whenIdle(), workerB.whenIdle()]);
      await Promise.all([workerA.stop(), workerB.stop()]);
      assert.deepEqual(errors, []);

      const batch = await b.getBatch('acme', id);
      assert.equal(batch.status, 'completed');
      assert.deepEqual(batch.request_counts, { total: ITEMS, completed: ITEMS, failed: 0 });
      assert.equal(batch.error_file_id, null);
      const lines = parseLines(await a.fileContent('acme', batch.output_file_id!));
      assert.equal(lines.length, ITEMS);
      assert.equal(new Set(lines.map((l) => l.id)).size, ITEMS, 'no item twice');
      lines.forEach((line, i) => {
        assert.equal(line.custom_id, `req-${i}`);
        assert.equal(line.response?.status_code, 200);
        const body = line.response?.body as { data: { embedding: number[] }[] };
        assert.deepEqual(
          body.data[0]?.embedding,
          expectedEmbedding(`text ${i}`, DIM),
          `result ${i} is input ${i}'s`,
        );
      });
      assert.ok(workerA.stats.recorded > 0, `instance a recorded ${workerA.stats.recorded}`);
      assert.ok(workerB.stats.recorded > 0, `instance b recorded ${workerB.stats.recorded}`);
      assert.equal(workerA.stats.recorded + workerB.stats.recorded, ITEMS);
      assert.equal(workerA.stats.duplicates + workerB.stats.duplicates, 0);
      const ran = [...exA.runs, ...exB.runs].map((item) => item.index);
      assert.equal(ran.length, ITEMS, 'no item ran twice while its lease held');
      assert.equal(new Set(ran).size, ITEMS);
      assert.equal(await a.backlog(), 0);
      assert.equal(await b.hasWork(), false);
    },
  );

  it(
    'finishes the items of a worker that claimed them and vanished, once their lease expires',
    { timeout: 30_000 },
    async () => {
      prefix = `crash-${++prefixes}:`;
      const ghost = await instance();
      const survivor = await instance();
      const id = await batchOf(ghost, 40);
      const taken = await ghost.claim('ghost', 15, 400);
      assert.equal(taken.length, 15);
      await ghost.close(); // the instance is gone: no record, no retryLater

      const ex = nodeExecutor(fleet.urls[0]!);
      const worker = new JobWorker(survivor, ex, { concurrency: 8, pollMs: 20, leaseMs: 30_000 });
      worker.start();
      await worker.whenIdle();
      await worker.stop();

      const batch = await survivor.getBatch('acme', id);
      assert.equal(batch.status, 'completed');
      assert.deepEqual(batch.request_counts, { total: 40, completed: 40, failed: 0 });
      const lines = parseLines(await survivor.fileContent('acme', batch.output_file_id!));
      assert.deepEqual(
        lines.map((l) => l.custom_id),
        Array.from({ length: 40 }, (_, i) => `req-${i}`),
      );
      const retaken = ex.runs.filter((item) => taken.some((t) => t.id === item.id));
      assert.equal(retaken.length, 15, 'every abandoned item ran again');
      assert.ok(
        retaken.every((item) => item.attempts === 2),
        'the second claim is the second attempt',
      );
      assert.equal(worker.stats.recorded, 40);
    },
  );

  it('resumes feeding the queue when the instance creating a batch died part-way', async () => {
    prefix = `feed-${++prefixes}:`;
    const a = await instance({ chunkSize: 10 });
    const id = await batchOf(a, 35);
    // As if the creator died after the commit and one chunk: the rest never reached the stream.
    await withRaw(async (raw) => {
      await raw.sendCommand(['DEL', `${prefix}queue`]);
      await raw.sendCommand(['HSET', `${prefix}batch:${id}`, 'queued', '0']);
    });
    assert.deepEqual(await a.claim('w', 100, 30_000), []);
    await withRaw(async (raw) => {
      const ttl = Number(await raw.sendCommand(['PTTL', `${prefix}items:${id}`]));
      assert.equal(ttl, -1, 'the commit made the staged items permanent');
    });
    await a.sweep(3);
    const items = await a.claim('w', 100, 30_000);
    assert.deepEqual(
      items.map((i) => i.index),
      Array.from({ length: 35 }, (_, i) => i),
    );
    await a.sweep(3);
    assert.deepEqual(await a.claim('w2', 100, 30_000), [], 'a second sweep adds nothing twice');
  });

  it('cancels a batch bigger than one step, sparing the items in flight', async () => {
    prefix = `big-cancel-${++prefixes}:`;
    const a = await instance({ chunkSize: 7 });
    const id = await batchOf(a, 50);
    const running = await a.claim('w', 5, 30_000);
    assert.equal(running.length, 5);
    const cancelling = await a.cancelBatch('acme', id);
    assert.equal(cancelling.status, 'cancelling');
    assert.deepEqual(cancelling.request_counts, { total: 50, completed: 0, failed: 45 });
    assert.deepEqual(await a.claim('w2', 50, 30_000), [], 'nothing else is handed out');
    for (const item of running) await a.record(item, { status: 200, body: item.index });
    const done = await a.getBatch('acme', id);
    assert.equal(done.status, 'cancelled');
    assert.deepEqual(
      parseLines(await a.fileContent('acme', done.output_file_id!)).map((l) => l.custom_id),
      ['req-0', 'req-1', 'req-2', 'req-3', 'req-4'],
    );
    const errors = parseLines(await a.fileContent('acme', done.error_file_id!));
    assert.deepEqual(
      errors.map((l) => l.custom_id),
      Array.from({ length: 45 }, (_, i) => `req-${i + 5}`),
    );
    assert.ok(errors.every((l) => l.error?.code === 'batch_cancelled'));
    assert.equal(await a.backlog(), 0);
  });

  it('expires a batch bigger than one step, discarding the late result of a held item', async () => {
    prefix = `big-expire-${++prefixes}:`;
    const a = await instance({ chunkSize: 7, completionWindows: { '1s': 1000 } });
    const id = await batchOf(a, 30, '1s');
    const [held] = await a.claim('w', 1, 30_000);
    assert.ok(held !== undefined);
    await until('the batch to expire', 5000, async () => {
      await a.sweep(3);
      return (await a.getBatch('acme', id)).status === 'expired';
    });
    assert.equal(await a.record(held, { status: 200, body: 'late' }), 'duplicate');
    const done = await a.getBatch('acme', id);
    assert.deepEqual(done.request_counts, { total: 30, completed: 0, failed: 30 });
    assert.equal(done.output_file_id, null);
    const errors = parseLines(await a.fileContent('acme', done.error_file_id!));
    assert.deepEqual(
      errors.map((l) => [l.custom_id, l.error?.code]),
      Array.from({ length: 30 }, (_, i) => [`req-${i}`, 'batch_expired']),
    );
    assert.equal(await a.hasWork(), false);
  });

  it('drops the queued entries of a cancelled batch on the way to the next batch', async () => {
    prefix = `dead-entries-${++prefixes}:`;
    const a = await instance();
    const cancelled = await batchOf(a, 3000);
    assert.equal((await a.cancelBatch('acme', cancelled)).status, 'cancelled');
    const next = await batchOf(a, 1);
    let claims = 0;
    let got: JobItem[] = [];
    while (got.length === 0 && claims < 5) {
      got = await a.claim('w', 1, 30_000);
      claims++;
    }
    assert.equal(got[0]?.batchId, next, `found after ${claims} claims`);
    assert.ok(claims <= 2, `${claims} claims to get past 3,000 dead entries`);
    await withRaw(async (raw) => {
      assert.equal(
        Number(await raw.sendCommand(['XLEN', `${prefix}queue`])),
        1,
        'only the live entry is left',
      );
    });
  });

  it('runs the items of a batch stored without an origin (an earlier version) as localhost', async () => {
    prefix = `no-origin-${++prefixes}:`;
    const a = await instance();
    const id = await batchOf(a, 2);
    await withRaw((raw) => raw.sendCommand(['HDEL', `${prefix}batch:${id}`, 'host', 'headers']));
    const items = await a.claim('w', 2, 30_000);
    assert.deepEqual(
      items.map((i) => [i.host, i.headers]),
      [
        ['localhost', []],
        ['localhost', []],
      ],
    );
  });

  it("keeps a deleted file's place for list cursors under a TTL, and not its content", async () => {
    prefix = `gone-${++prefixes}:`;
    const a = await instance();
    const older = await a.createFile('acme', {
      filename: 'a.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(1),
    });
    const gone = await a.createFile('acme', {
      filename: 'b.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(1),
    });
    await a.deleteFile('acme', gone.id);
    await withRaw(async (raw) => {
      const ttl = Number(await raw.sendCommand(['PTTL', `${prefix}file-gone:${gone.id}`]));
      assert.ok(ttl > 6 * 86_400_000 && ttl <= 7 * 86_400_000, `tombstone TTL ${ttl} ms`);
      assert.equal(Number(await raw.sendCommand(['EXISTS', `${prefix}file:${gone.id}`])), 0);
    });
    assert.deepEqual(
      (await a.listFiles('acme', { after: gone.id })).data.map((f) => f.id),
      [older.id],
    );
    // Once the tombstone expired, the id is unknown.
    await withRaw((raw) => raw.sendCommand(['DEL', `${prefix}file-gone:${gone.id}`]));
    await assert.rejects(a.listFiles('acme', { after: gone.id }), (err: unknown) => {
      assert.ok(err instanceof JobError);
      assert.equal(err.kind.status, 400);
      assert.equal(err.param, 'after');
      return true;
    });
  });

  it('keeps working after Redis lost its script cache', async () => {
    prefix = `flush-${++prefixes}:`;
    const a = await instance();
    const id = await batchOf(a, 2);
    await withRaw((raw) => raw.sendCommand(['SCRIPT', 'FLUSH']));
    const items = await a.claim('w', 2, 30_000);
    assert.equal(items.length, 2);
    assert.equal(await a.record(items[0]!, { status: 200, body: 1 }), 'recorded');
    assert.equal(await a.record(items[1]!, { status: 200, body: 2 }), 'last');
    await a.finalize(id);
    assert.equal((await a.getBatch('acme', id)).status, 'completed');
  });

  it('rejects calls while Redis is down with a backend error, not a JobError, and recovers after', async () => {
    prefix = `down-${++prefixes}:`;
    const a = await instance();
    await batchOf(a, 1);
    const r = await server();
    await r.stop();
    try {
      await assert.rejects(a.claim('w', 1, 30_000), (err: unknown) => !(err instanceof JobError));
      await assert.rejects(a.getBatch('acme', 'batch_x'), (err: unknown) => !(err instanceof JobError));
    } finally {
      await r.start();
    }
    // The restarted test server is empty (no persistence): the backend must start over cleanly.
    await until('the client to reconnect', 5000, () =>
      a.hasWork().then(
        () => true,
        () => false,
      ),
    );
    const id = await batchOf(a, 1);
    const [item] = await a.claim('w', 1, 30_000);
    assert.equal(item?.batchId, id);
  });
});

describe('redis job backend while Redis is frozen', { skip: redisSkip() }, () => {
  // A server of its own: this suite freezes it.
  let frozen: TestRedis | null = null;
  const open: RedisJobBackend[] = [];
  before(async () => {
    frozen = await startRedis();
  });
  after(async () => {
    frozen?.resume();
    for (const b of open.splice(0)) await b.close();
    await frozen?.stop();
  });

  async function instance(): Promise<RedisJobBackend> {
    const backend = await createRedisJobBackend({
      url: frozen!.url,
      prefix: 'frozen:',
      commandTimeoutMs: 300,
    });
    open.push(backend);
    return backend;
  }

  it('rejects calls after the command timeout, closes, and gives back the items of a claim answered late', async () => {
    const a = await instance();
    const b = await instance();
    const c = await instance();
    // Nothing to claim yet, but Redis learns the script: the late claim below then runs by its SHA.
    assert.deepEqual(await a.claim('worker-a', 10, 60_000), []);
    const file = await a.createFile('acme', {
      filename: 'in.jsonl',
      purpose: 'batch',
      content: embeddingsJsonl(2),
    });
    const batch = await a.createBatch('acme', {
      input_file_id: file.id,
      endpoint: EMBEDDINGS,
      completion_window: '24h',
    });
    frozen!.pause();
    try {
      await assert.rejects(
        settlesWithin(a.listBatches('acme'), 3000, 'listBatches'),
        /redis did not answer within 300 ms/,
      );
      await assert.rejects(
        settlesWithin(
          a.createFile('acme', { filename: 'x.jsonl', purpose: 'batch', content: embeddingsJsonl(1) }),
          3000,
          'createFile',
        ),
        /redis did not answer within 300 ms/,
      );
      // Sent to the frozen server: Redis runs this claim once thawed, after the worker gave up on it.
      await assert.rejects(
        settlesWithin(a.claim('worker-a', 10, 60_000), 3000, 'claim'),
        /redis did not answer within 300 ms/,
      );
      c.getBatch('acme', batch.id).catch(() => undefined);
      await settlesWithin(c.close(), 3000, 'close with a reply outstanding');
    } finally {
      frozen!.resume();
    }
    // The late claim leased both items to worker-a for 60 s; they come back at once, attempts uncounted.
    let items: JobItem[] = [];
    await until('the late-claimed items to be given back', 5000, async () => {
      items = items.concat(await b.claim('worker-b', 10, 60_000));
      return items.length === 2;
    });
    assert.deepEqual(
      items.map((i) => [i.batchId, i.index, i.attempts]),
      [
        [batch.id, 0, 1],
        [batch.id, 1, 1],
      ],
    );
  });
});
