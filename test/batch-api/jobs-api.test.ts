/**
 * The durable batch API (`/v1/files`, `/v1/batches`) through the official `openai` SDK against a
 * real Sluice in front of real simulated nodes: upload, create, progress to `completed`, the
 * output file in input order with results derived from each input, the error file, listing,
 * cancelling, tenant isolation, validation errors, and Idempotency-Key on create.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const DIM = 64; // embedding_dim of the `fast` profile

interface OutputLine {
  id: string;
  custom_id: string;
  response: { status_code: number; body: { data?: { embedding: number[] }[] } } | null;
  error: { code: string; message: string } | null;
}

function jsonl(n: number, prefix = 'doc', bad: ReadonlySet<number> = new Set()): string {
  let out = '';
  for (let i = 0; i < n; i++) {
    const body = bad.has(i) ? { model: 'sim-embed' } : { model: 'sim-embed', input: `${prefix} ${i}` };
    out +=
      JSON.stringify({ custom_id: `${prefix}-${i}`, method: 'POST', url: '/v1/embeddings', body }) + '\n';
  }
  return out;
}

function lines(text: string): OutputLine[] {
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as OutputLine);
}

describe('batch jobs through the openai SDK', () => {
  let fleet: SimFleet;
  let proxy: TestSluice;
  let acme: OpenAI;
  let globex: OpenAI;

  before(async () => {
    process.env['JOBS_ACME_KEY'] = 'sk-acme-jobs';
    process.env['JOBS_GLOBEX_KEY'] = 'sk-globex-jobs';
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    proxy = await startTestSluice(
      basicConfig(
        fleet.urls,
        `tenants:
  - name: acme
    keys: [{ env: JOBS_ACME_KEY }]
  - name: globex
    keys: [{ env: JOBS_GLOBEX_KEY }]
batch_api:
  jobs: { concurrency: 4, poll_ms: 20 }
`,
      ),
    );
    acme = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'sk-acme-jobs', maxRetries: 0 });
    globex = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'sk-globex-jobs', maxRetries: 0 });
  });

  after(async () => {
    await proxy?.close();
    await fleet?.close();
  });

  async function finished(client: OpenAI, id: string): Promise<OpenAI.Batches.Batch> {
    let batch = await client.batches.retrieve(id);
    await waitFor(
      async () => {
        batch = await client.batches.retrieve(id);
        return ['completed', 'failed', 'cancelled', 'expired'].includes(batch.status);
      },
      20_000,
      `batch ${id} to finish`,
    );
    return batch;
  }

  it('runs an uploaded file to completion with every result in input order', async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(40)), 'in.jsonl'),
      purpose: 'batch',
    });
    assert.equal(file.object, 'file');
    assert.equal(file.purpose, 'batch');
    assert.equal(file.filename, 'in.jsonl');
    const created = await acme.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
      metadata: { run: 'order' },
    });
    assert.ok(['validating', 'in_progress'].includes(created.status));
    assert.equal(created.request_counts?.total, 40);
    const done = await finished(acme, created.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 40, completed: 40, failed: 0 });
    assert.equal(done.error_file_id ?? null, null);
    assert.deepEqual(done.metadata, { run: 'order' });
    const out = lines(await (await acme.files.content(done.output_file_id!)).text());
    assert.equal(out.length, 40);
    out.forEach((l, i) => {
      assert.equal(l.custom_id, `doc-${i}`);
      assert.equal(l.response?.status_code, 200);
      assert.deepEqual(l.response?.body.data?.[0]?.embedding, expectedEmbedding(`doc ${i}`, DIM));
    });
  });

  it('puts failed items in the error file and the rest in the output file', async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(6, 'mixed', new Set([1, 4]))), 'mixed.jsonl'),
      purpose: 'batch',
    });
    const b = await acme.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    const done = await finished(acme, b.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total: 6, completed: 4, failed: 2 });
    const ok = lines(await (await acme.files.content(done.output_file_id!)).text());
    assert.deepEqual(
      ok.map((l) => l.custom_id),
      ['mixed-0', 'mixed-2', 'mixed-3', 'mixed-5'],
    );
    const failed = lines(await (await acme.files.content(done.error_file_id!)).text());
    assert.deepEqual(
      failed.map((l) => [l.custom_id, l.response?.status_code]),
      [
        ['mixed-1', 400],
        ['mixed-4', 400],
      ],
    );
  });

  it('names the bad line of an upload and refuses unknown endpoints', async () => {
    const bad = jsonl(2) + '{"custom_id": "x", "method": "GET", "url": "/v1/embeddings", "body": {}}\n';
    await assert.rejects(
      acme.files.create({ file: await toFile(Buffer.from(bad), 'bad.jsonl'), purpose: 'batch' }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /line 3/.test(e.message),
    );
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(1)), 'ok.jsonl'),
      purpose: 'batch',
    });
    await assert.rejects(
      acme.batches.create({
        input_file_id: file.id,
        endpoint: '/v1/responses',
        completion_window: '24h',
      }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /endpoint/.test(e.message),
    );
    await assert.rejects(
      acme.batches.create({
        input_file_id: file.id,
        endpoint: '/v1/embeddings',
        completion_window: '7d' as '24h',
      }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /completion_window/.test(e.message),
    );
  });

  it('refuses an upload that is not multipart form data', async () => {
    const r = await fetch(`${proxy.url}/v1/files`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-acme-jobs', 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(r.status, 400);
    assert.match(((await r.json()) as { error: { message: string } }).error.message, /multipart/);
  });

  it('keeps each tenant’s files and batches to itself', async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(2, 'own')), 'own.jsonl'),
      purpose: 'batch',
    });
    const b = await acme.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    await assert.rejects(globex.batches.retrieve(b.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(globex.files.retrieve(file.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(
      globex.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
    const theirs = await globex.batches.list();
    assert.ok(!theirs.data.some((x) => x.id === b.id));
    const ours = await acme.batches.list({ limit: 100 });
    assert.ok(ours.data.some((x) => x.id === b.id));
    const noKey = await fetch(`${proxy.url}/v1/batches`);
    assert.equal(noKey.status, 401);
  });

  it('cancels a running batch: unstarted items fail as cancelled, the batch ends cancelled', async () => {
    for (const n of fleet.nodes) n.setFaults({ stall_ms: 300 });
    try {
      const file = await acme.files.create({
        file: await toFile(Buffer.from(jsonl(30, 'cancel')), 'cancel.jsonl'),
        purpose: 'batch',
      });
      const b = await acme.batches.create({
        input_file_id: file.id,
        endpoint: '/v1/embeddings',
        completion_window: '24h',
      });
      await waitFor(
        async () => (await acme.batches.retrieve(b.id)).status === 'in_progress',
        5000,
        'in_progress',
      );
      const c = await acme.batches.cancel(b.id);
      assert.ok(['cancelling', 'cancelled'].includes(c.status), c.status);
      const done = await finished(acme, b.id);
      assert.equal(done.status, 'cancelled');
      const counts = done.request_counts!;
      assert.equal(counts.completed + counts.failed, 30);
      assert.ok(counts.failed >= 20, `most items never started (failed ${counts.failed})`);
      const errors = lines(await (await acme.files.content(done.error_file_id!)).text());
      assert.ok(errors.every((l) => l.error?.code === 'batch_cancelled'));
      await assert.rejects(acme.batches.cancel(b.id), (e: unknown) => e instanceof OpenAI.ConflictError);
    } finally {
      for (const n of fleet.nodes) n.setFaults({ stall_ms: 0 });
    }
  });

  it('creates one batch for a retried create with the same Idempotency-Key', async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(2, 'idem')), 'i.jsonl'),
      purpose: 'batch',
    });
    const params = {
      input_file_id: file.id,
      endpoint: '/v1/embeddings' as const,
      completion_window: '24h' as const,
    };
    const first = await acme.batches.create(params, { headers: { 'Idempotency-Key': 'create-1' } });
    const again = await acme.batches.create(params, { headers: { 'Idempotency-Key': 'create-1' } });
    assert.equal(again.id, first.id);
    // Another tenant using the same key string gets its own batch.
    const otherFile = await globex.files.create({
      file: await toFile(Buffer.from(jsonl(1)), 'g.jsonl'),
      purpose: 'batch',
    });
    const other = await globex.batches.create(
      { ...params, input_file_id: otherFile.id },
      { headers: { 'Idempotency-Key': 'create-1' } },
    );
    assert.notEqual(other.id, first.id);
    await assert.rejects(
      acme.batches.create(
        { ...params, completion_window: '24h', metadata: { x: 'y' } },
        { headers: { 'Idempotency-Key': 'create-1' } },
      ),
      (e: unknown) => e instanceof OpenAI.ConflictError,
    );
  });

  it('lists, pages and deletes files', async () => {
    // Batches that finish add their output files to the list: let globex's earlier ones end first.
    await waitFor(
      async () =>
        (await globex.batches.list()).data.every((x) =>
          ['completed', 'failed', 'cancelled'].includes(x.status),
        ),
      20_000,
      'globex batches to end',
    );
    const a = await globex.files.create({
      file: await toFile(Buffer.from(jsonl(1, 'p1')), 'p1.jsonl'),
      purpose: 'batch',
    });
    const b = await globex.files.create({
      file: await toFile(Buffer.from(jsonl(1, 'p2')), 'p2.jsonl'),
      purpose: 'batch',
    });
    const page = await globex.files.list({ limit: 1 });
    assert.equal(page.data.length, 1);
    assert.equal(page.data[0]?.id, b.id, 'newest first');
    const del = await globex.files.delete(a.id);
    assert.equal(del.deleted, true);
    await assert.rejects(globex.files.retrieve(a.id), (e: unknown) => e instanceof OpenAI.NotFoundError);
    const r = await fetch(`${proxy.url}/v1/batches?limit=500`, {
      headers: { authorization: 'Bearer sk-globex-jobs' },
    });
    assert.equal(r.status, 400);
  });

  it('exports the batch API and job worker counters on /metrics', async () => {
    const text = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
    const value = (name: string): number =>
      Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
    assert.ok(value('sluice_batch_api_requests_total') > 10);
    assert.ok(
      value('sluice_batch_jobs_items_recorded_total') >= 40,
      'the 40-item batch and others were recorded',
    );
    assert.equal(value('sluice_batch_jobs_duplicate_results_total'), 0);
    await waitFor(
      async () => {
        const t = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
        return /^sluice_batch_jobs_backlog_items 0$/m.test(t);
      },
      5000,
      'the backlog gauge to reach 0',
    );
  });
});
