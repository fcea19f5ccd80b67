/**
 * The batch API in distributed mode: two Sluice instances on one Redis share the durable queue. A
 * batch created through one instance is worked on by both and readable through either, with every
 * result once and in input order; Idempotency-Key holds across instances. Real redis-server.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { redisSkip, settlesWithin, startRedis, type TestRedis } from '../helpers/redis.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const DIM = 64; // embedding_dim of the `fast` profile
const ITEMS = 300;

function config(nodes: readonly string[], redisUrl: string): string {
  return basicConfig(
    nodes,
    `batch_api:
  jobs:
    store: redis
    redis: { url: ${redisUrl} }
    concurrency: 8
    poll_ms: 20
    lease_ms: 5000
`,
  );
}

describe('batch API on a shared Redis queue', { skip: redisSkip() }, () => {
  let redis: TestRedis;
  let fleet: SimFleet;
  let a: TestSluice;
  let b: TestSluice;

  before(async () => {
    redis = await startRedis();
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    a = await startTestSluice(config(fleet.urls, redis.url));
    b = await startTestSluice(config(fleet.urls, redis.url));
  });
  after(async () => {
    await a?.close();
    await b?.close();
    await fleet?.close();
    await redis?.stop();
  });

  it('shares one batch between two instances, each result once and in order', async () => {
    let text = '';
    for (let i = 0; i < ITEMS; i++) {
      text +=
        JSON.stringify({
          custom_id: `r-${i}`,
          method: 'POST',
          url: '/v1/embeddings',
          body: { model: 'e', input: `shared ${i}` },
        }) + '\n';
    }
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([text]), 'shared.jsonl');
    const file = (await (await fetch(`${a.url}/v1/files`, { method: 'POST', body: form })).json()) as {
      id: string;
    };
    const create = (): Promise<Response> =>
      fetch(`${a.url}/v1/batches`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'shared-create' },
        body: JSON.stringify({
          input_file_id: file.id,
          endpoint: '/v1/embeddings',
          completion_window: '24h',
        }),
      });
    const created = (await (await create()).json()) as { id: string };
    // The same key through the other instance replays the same batch.
    const again = await fetch(`${b.url}/v1/batches`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'shared-create' },
      body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
    });
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(((await again.json()) as { id: string }).id, created.id);

    type View = { status: string; output_file_id: string | null; request_counts: { completed: number } };
    let view: View | null = null;
    await waitFor(
      async () => {
        view = (await (await fetch(`${b.url}/v1/batches/${created.id}`)).json()) as View;
        return view.status === 'completed';
      },
      30_000,
      'the batch to complete',
    );
    const done = view as unknown as View;
    assert.equal(done.request_counts.completed, ITEMS);
    const out = (await (await fetch(`${b.url}/v1/files/${done.output_file_id ?? ''}/content`)).text())
      .split('\n')
      .filter((l) => l !== '')
      .map(
        (l) =>
          JSON.parse(l) as { custom_id: string; response: { body: { data: { embedding: number[] }[] } } },
      );
    assert.equal(out.length, ITEMS);
    out.forEach((l, i) => {
      assert.equal(l.custom_id, `r-${i}`);
      assert.deepEqual(l.response.body.data[0]?.embedding, expectedEmbedding(`shared ${i}`, DIM));
    });
    const recordedA = a.sluice.batch!.worker.stats.recorded;
    const recordedB = b.sluice.batch!.worker.stats.recorded;
    assert.equal(recordedA + recordedB, ITEMS);
    assert.ok(recordedA > 0 && recordedB > 0, `both instances worked (${recordedA} + ${recordedB})`);
  });

  it('answers 503 batch_store_unavailable while Redis is frozen, within the command timeout', async () => {
    redis.pause();
    try {
      // The job store's command timeout is 5 s, the idempotency store's 2 s.
      const list = await settlesWithin(fetch(`${b.url}/v1/batches`), 10_000, 'GET /v1/batches');
      assert.equal(list.status, 503);
      assert.equal(
        ((await list.json()) as { error: { code: string } }).error.code,
        'batch_store_unavailable',
      );
      const form = new FormData();
      form.append('purpose', 'batch');
      form.append('file', new Blob(['{}\n']), 'frozen.jsonl');
      const upload = await settlesWithin(
        fetch(`${b.url}/v1/files`, { method: 'POST', headers: { 'idempotency-key': 'frozen' }, body: form }),
        10_000,
        'POST /v1/files',
      );
      assert.equal(upload.status, 503);
      assert.equal(b.sluice.batch!.api.stats.storeErrors, 2);
    } finally {
      redis.resume();
    }
    await waitFor(
      async () => (await fetch(`${b.url}/v1/batches`)).status === 200,
      10_000,
      'the batch API to answer again',
    );
    await waitFor(
      async () => jobLines(b).some((l) => l.includes('available again')),
      5000,
      'the recovery line',
    );
    // The worker's timed-out polls are counted, not logged one by one.
    assert.ok(b.sluice.batch!.worker.stats.storeErrors >= 1);
    assert.deepEqual(jobLines(b), [
      'warn jobs: redis unavailable (redis did not answer within 5000 ms)',
      'info jobs: redis available again',
    ]);
  });

  // Last in the file: the restarted test server is empty.
  it('answers 503 batch_store_unavailable with retry-after while Redis is down, and serves again after', async () => {
    const logged = a.logs.length;
    await redis.stop();
    try {
      // The worker polls every 20 ms meanwhile.
      const failed = a.sluice.batch!.worker.stats.storeErrors;
      await waitFor(
        async () => a.sluice.batch!.worker.stats.storeErrors >= failed + 5,
        5000,
        'worker polls to fail',
      );
      const list = await fetch(`${a.url}/v1/batches`);
      assert.equal(list.status, 503);
      assert.equal(list.headers.get('retry-after'), '1');
      assert.equal(
        ((await list.json()) as { error: { code: string } }).error.code,
        'batch_store_unavailable',
      );
      // With a key the idempotency store, on the same Redis, is the first call to fail.
      const create = await fetch(`${a.url}/v1/batches`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'while-down' },
        body: JSON.stringify({
          input_file_id: 'file-x',
          endpoint: '/v1/embeddings',
          completion_window: '24h',
        }),
      });
      assert.equal(create.status, 503);
      assert.equal(
        ((await create.json()) as { error: { code: string } }).error.code,
        'batch_store_unavailable',
      );
      assert.equal(a.sluice.batch!.api.stats.storeErrors, 2);
    } finally {
      await redis.start();
    }
    await waitFor(
      async () => (await fetch(`${a.url}/v1/batches`)).status === 200,
      10_000,
      'the batch API to answer again',
    );
    await waitFor(
      async () => jobLines(a, logged).some((l) => l.includes('available again')),
      5000,
      'the recovery line',
    );
    const lines = jobLines(a, logged);
    assert.equal(lines.length, 2, lines.join('\n'));
    assert.match(lines[0]!, /^warn jobs: redis unavailable \(.+\)$/);
    assert.equal(lines[1], 'info jobs: redis available again');
  });
});

/** The log lines of the job store and the worker from line `from` on, as `level message`. */
function jobLines(t: TestSluice, from = 0): string[] {
  return t.logs
    .slice(from)
    .map((l) => /\b(debug|info|warn|error)\b\s+(.*)$/.exec(l.trim()))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => `${m[1]} ${m[2]}`)
    .filter((l) => / (jobs: redis|batch jobs:)/.test(l));
}
