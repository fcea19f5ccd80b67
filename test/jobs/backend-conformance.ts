/**
 * The behaviour every `JobBackend` must show, as one suite that each backend's test runs with its
 * own factory. It reaches the backend through the interface only (no SQL, no Redis commands) and
 * waits on real time: leases, retry delays and the completion window are short, and every wait
 * polls with a deadline.
 */

import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { JobBackend } from '../../proxy/jobs/job-backend.js';
import { JobError } from '../../proxy/jobs/job-errors.js';
import type { BatchObject, JobItem, OutputLine } from '../../proxy/jobs/job-types.js';
import { embeddingLine, embeddingsJsonl } from './job-test-kit.js';

/**
 * Completion windows the backend under test must accept: the OpenAI `24h` and a `1s` window for
 * the expiry case (durations in ms). Pass them to the backend's factory.
 */
export const CONFORMANCE_COMPLETION_WINDOWS: Readonly<Record<string, number>> = Object.freeze({
  '24h': 86_400_000,
  '1s': 1_000,
});

/** What a backend's `open` gives the suite: an empty backend and how to dispose of it. */
export interface BackendUnderTest {
  backend: JobBackend;
  /** Closes the backend and removes everything it stored. */
  cleanup: () => Promise<void>;
}

const ALICE = 'alice';
const BOB = 'bob';
const LONG_LEASE_MS = 60_000;
const SHORT_LEASE_MS = 300;
const RETRY_DELAY_MS = 300;
const DEADLINE_MS = 5_000;
const EMBEDDINGS = '/v1/embeddings';

/** A predicate for `assert.rejects`: a `JobError` with this HTTP status (and OpenAI code). */
function jobError(status: number, code?: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof JobError, `expected a JobError, got ${String(err)}`);
    assert.equal(err.kind.status, status, err.message);
    if (code !== undefined) assert.equal(err.kind.code, code, err.message);
    return true;
  };
}

/** Repeats `step` until `done` holds for its value, or fails after `deadlineMs`. */
async function eventually<T>(
  what: string,
  step: () => Promise<T>,
  done: (value: T) => boolean,
  deadlineMs = DEADLINE_MS,
): Promise<T> {
  const deadline = performance.now() + deadlineMs;
  for (;;) {
    const value = await step();
    if (done(value)) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The parsed lines of a file; an empty list for a null id. */
async function linesOf(backend: JobBackend, owner: string, fileId: string | null): Promise<OutputLine[]> {
  if (fileId === null) return [];
  const content = await backend.fileContent(owner, fileId);
  assert.ok(content.endsWith('\n'), 'every line ends in a newline');
  return content
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as OutputLine);
}

/**
 * Registers the conformance suite for one backend. `open` is called before every test and must
 * resolve with an empty backend that accepts the default endpoints (`/v1/chat/completions`,
 * `/v1/completions`, `/v1/embeddings`), the completion windows `CONFORMANCE_COMPLETION_WINDOWS`
 * and the default input limits, and that keeps time with the real wall clock.
 *
 * @example
 * describeJobBackend('sqlite', async () => {
 *   const env = tempDir();
 *   const backend = createSqliteJobBackend(env.path, { completionWindows: CONFORMANCE_COMPLETION_WINDOWS });
 *   return { backend, cleanup: async () => { await backend.close(); env.cleanup(); } };
 * });
 */
export function describeJobBackend(
  name: string,
  open: () => Promise<BackendUnderTest>,
  opts: { skip?: string | false } = {},
): void {
  describe(`job backend conformance (${name})`, { skip: opts.skip ?? false }, () => {
    let b: JobBackend;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ backend: b, cleanup } = await open());
    });
    afterEach(async () => {
      await cleanup();
    });

    async function upload(owner: string, n: number): Promise<string> {
      return (
        await b.createFile(owner, { filename: 'in.jsonl', purpose: 'batch', content: embeddingsJsonl(n) })
      ).id;
    }

    async function batchOf(owner: string, n: number, window = '24h'): Promise<BatchObject> {
      const fileId = await upload(owner, n);
      return b.createBatch(owner, { input_file_id: fileId, endpoint: EMBEDDINGS, completion_window: window });
    }

    async function status(owner: string, id: string): Promise<string> {
      return (await b.getBatch(owner, id)).status;
    }

    /** Claims one item for `workerId` as soon as one is runnable. */
    async function claimOne(workerId: string, leaseMs: number): Promise<JobItem> {
      const items = await eventually(
        `an item for ${workerId}`,
        () => b.claim(workerId, 1, leaseMs),
        (got) => got.length === 1,
      );
      return items[0]!;
    }

    it('rejects an upload with a bad line, naming the line, and stores nothing', async () => {
      await assert.rejects(
        b.createFile(ALICE, {
          filename: 'x.jsonl',
          purpose: 'batch',
          content: `${embeddingLine(0)}\nnope\n`,
        }),
        (err: unknown) => jobError(400, 'invalid_file')(err) && (err as JobError).line === 2,
      );
      await assert.rejects(
        b.createFile(ALICE, {
          filename: 'x.jsonl',
          purpose: 'batch',
          content: `${embeddingLine(0)}\n${embeddingLine(1)}\n${embeddingLine(0)}\n`,
        }),
        (err: unknown) => jobError(400, 'invalid_file')(err) && (err as JobError).line === 3,
      );
      await assert.rejects(
        b.createFile(ALICE, { filename: 'x.jsonl', purpose: 'fine-tune', content: embeddingLine(0) }),
        (err: unknown) => jobError(400)(err) && (err as JobError).param === 'purpose',
      );
      await assert.rejects(
        b.createFile(ALICE, { filename: 'x.jsonl', purpose: 'batch', content: '' }),
        jobError(400),
      );
      assert.deepEqual((await b.listFiles(ALICE)).data, []);
    });

    it('stores an upload as sent and describes it as an OpenAI file object', async () => {
      const content = embeddingsJsonl(3);
      const before = Math.floor(Date.now() / 1000);
      const file = await b.createFile(ALICE, {
        filename: 'in.jsonl',
        purpose: 'batch',
        content: Buffer.from(content),
      });
      assert.equal(file.object, 'file');
      assert.equal(file.purpose, 'batch');
      assert.equal(file.status, 'processed');
      assert.equal(file.filename, 'in.jsonl');
      assert.equal(file.bytes, Buffer.byteLength(content));
      assert.ok(file.created_at >= before && file.created_at <= before + 5, `created_at ${file.created_at}`);
      assert.deepEqual(await b.getFile(ALICE, file.id), file);
      assert.equal(await b.fileContent(ALICE, file.id), content);
    });

    it("keeps each owner's files and batches apart: another owner's ids are not found", async () => {
      const batch = await batchOf(ALICE, 2);
      const fileId = batch.input_file_id;
      await assert.rejects(b.getFile(BOB, fileId), jobError(404, 'file_not_found'));
      await assert.rejects(b.getFile('', fileId), jobError(404, 'file_not_found'));
      await assert.rejects(b.fileContent(BOB, fileId), jobError(404));
      await assert.rejects(b.deleteFile(BOB, fileId), jobError(404));
      await assert.rejects(
        b.createBatch(BOB, { input_file_id: fileId, endpoint: EMBEDDINGS, completion_window: '24h' }),
        jobError(404),
      );
      await assert.rejects(b.getBatch(BOB, batch.id), jobError(404, 'batch_not_found'));
      await assert.rejects(b.cancelBatch(BOB, batch.id), jobError(404));
      assert.deepEqual((await b.listFiles(BOB)).data, []);
      assert.deepEqual((await b.listBatches(BOB)).data, []);
      assert.deepEqual(
        (await b.listFiles(ALICE)).data.map((f) => f.id),
        [fileId],
      );
      assert.deepEqual(
        (await b.listBatches(ALICE)).data.map((x) => x.id),
        [batch.id],
      );
      assert.equal(await status(ALICE, batch.id), 'validating', "bob's cancel changed nothing");
      const items = await b.claim('w1', 10, LONG_LEASE_MS);
      assert.deepEqual(
        items.map((i) => i.owner),
        [ALICE, ALICE],
      );
    });

    it('runs a batch from claim to completed, with output and error files in input order', async () => {
      const fileId = await upload(ALICE, 4);
      const created = await b.createBatch(ALICE, {
        input_file_id: fileId,
        endpoint: EMBEDDINGS,
        completion_window: '24h',
        metadata: { job: 'nightly' },
      });
      assert.equal(created.object, 'batch');
      assert.equal(created.status, 'validating');
      assert.equal(created.endpoint, EMBEDDINGS);
      assert.equal(created.input_file_id, fileId);
      assert.equal(created.errors, null);
      assert.equal(created.in_progress_at, null);
      assert.deepEqual(created.metadata, { job: 'nightly' });
      assert.deepEqual(created.request_counts, { total: 4, completed: 0, failed: 0 });
      assert.equal(created.expires_at - created.created_at, 86_400);
      assert.deepEqual(await b.getBatch(ALICE, created.id), created);

      const items = await b.claim('w1', 10, LONG_LEASE_MS);
      assert.deepEqual(
        items.map((i) => [i.batchId, i.owner, i.index, i.customId, i.method, i.url, i.attempts]),
        [0, 1, 2, 3].map((i) => [created.id, ALICE, i, `req-${i}`, 'POST', EMBEDDINGS, 1]),
      );
      assert.deepEqual(JSON.parse(items[2]!.body), { model: 'sim-embed', input: 'text 2' });
      assert.equal(new Set(items.map((i) => i.id)).size, 4, 'item ids are distinct');
      const running = await b.getBatch(ALICE, created.id);
      assert.equal(running.status, 'in_progress');
      assert.ok(running.in_progress_at !== null);

      // Results arrive out of order; the files must still be in input order.
      assert.equal(await b.record(items[3]!, { status: 200, body: { n: 3 } }), 'recorded');
      assert.equal(
        await b.record(items[1]!, { status: 400, body: { error: { message: 'bad' } } }),
        'recorded',
      );
      assert.equal(await b.record(items[0]!, { status: 200, body: { n: 0 } }), 'recorded');
      assert.deepEqual((await b.getBatch(ALICE, created.id)).request_counts, {
        total: 4,
        completed: 2,
        failed: 1,
      });
      assert.equal(await b.fail(items[2]!, { code: 'request_failed', message: 'ECONNRESET' }), 'last');
      const finalizing = await b.getBatch(ALICE, created.id);
      assert.equal(finalizing.status, 'finalizing');
      assert.ok(finalizing.finalizing_at !== null);

      await b.finalize(created.id);
      const done = await b.getBatch(ALICE, created.id);
      assert.equal(done.status, 'completed');
      assert.ok(done.completed_at !== null);
      assert.deepEqual(done.request_counts, { total: 4, completed: 2, failed: 2 });
      const out = await linesOf(b, ALICE, done.output_file_id);
      assert.deepEqual(
        out.map((l) => [l.id, l.custom_id, l.response?.status_code, l.response?.body, l.error]),
        [
          [`batch_req_${items[0]!.id}`, 'req-0', 200, { n: 0 }, null],
          [`batch_req_${items[3]!.id}`, 'req-3', 200, { n: 3 }, null],
        ],
      );
      const errors = await linesOf(b, ALICE, done.error_file_id);
      assert.deepEqual(
        errors.map((l) => [l.id, l.custom_id, l.response?.status_code ?? null, l.error]),
        [
          [`batch_req_${items[1]!.id}`, 'req-1', 400, null],
          [`batch_req_${items[2]!.id}`, 'req-2', null, { code: 'request_failed', message: 'ECONNRESET' }],
        ],
      );
      assert.deepEqual(errors[0]!.response?.body, { error: { message: 'bad' } });

      const output = await b.getFile(ALICE, done.output_file_id!);
      assert.equal(output.purpose, 'batch_output');
      assert.equal(output.bytes, Buffer.byteLength(await b.fileContent(ALICE, output.id)));
      await assert.rejects(b.getFile(BOB, output.id), jobError(404));
      const listed = (await b.listFiles(ALICE)).data.map((f) => f.id);
      assert.ok(
        listed.includes(done.output_file_id!) && listed.includes(done.error_file_id!),
        'files listed',
      );

      await b.finalize(created.id);
      assert.deepEqual(await b.getBatch(ALICE, created.id), done, 'a second finalize changes nothing');
      assert.deepEqual(await b.claim('w1', 10, LONG_LEASE_MS), []);
    });

    it('hands items out oldest batch first, lowest index first, and no more than asked', async () => {
      const first = await batchOf(ALICE, 2);
      const second = await batchOf(BOB, 2);
      assert.deepEqual(await b.claim('w1', 0, LONG_LEASE_MS), []);
      const items = await b.claim('w1', 3, LONG_LEASE_MS);
      assert.deepEqual(
        items.map((i) => [i.batchId, i.index, i.owner]),
        [
          [first.id, 0, ALICE],
          [first.id, 1, ALICE],
          [second.id, 0, BOB],
        ],
      );
      const rest = await b.claim('w2', 3, LONG_LEASE_MS);
      assert.deepEqual(
        rest.map((i) => [i.batchId, i.index]),
        [[second.id, 1]],
      );
      assert.deepEqual(await b.claim('w3', 3, LONG_LEASE_MS), [], 'leased items are not handed out twice');
    });

    it('fails a batch whose lines target another endpoint, and rejects bad ids, endpoints and windows', async () => {
      const content = `${embeddingLine(0)}\n${embeddingLine(1, '/v1/chat/completions')}\n`;
      const file = await b.createFile(ALICE, { filename: 'in.jsonl', purpose: 'batch', content });
      const failed = await b.createBatch(ALICE, {
        input_file_id: file.id,
        endpoint: EMBEDDINGS,
        completion_window: '24h',
      });
      assert.equal(failed.status, 'failed');
      assert.ok(failed.failed_at !== null);
      // No item was created: the counts hold completed + failed = total.
      assert.deepEqual(failed.request_counts, { total: 0, completed: 0, failed: 0 });
      assert.deepEqual(
        failed.errors?.data.map((e) => [e.code, e.line]),
        [['mismatched_endpoint', 2]],
      );
      assert.deepEqual(await b.claim('w1', 10, LONG_LEASE_MS), []);
      assert.equal(await b.hasWork(), false, 'a failed batch leaves no work');

      await assert.rejects(b.getBatch(ALICE, 'batch_nope'), jobError(404));
      await assert.rejects(b.getFile(ALICE, 'file-nope'), jobError(404));
      await assert.rejects(
        b.createBatch(ALICE, { input_file_id: 'file-nope', endpoint: EMBEDDINGS, completion_window: '24h' }),
        jobError(404),
      );
      await assert.rejects(
        b.createBatch(ALICE, { input_file_id: file.id, endpoint: '/v1/images', completion_window: '24h' }),
        (err: unknown) => jobError(400)(err) && (err as JobError).param === 'endpoint',
      );
      await assert.rejects(
        b.createBatch(ALICE, { input_file_id: file.id, endpoint: EMBEDDINGS, completion_window: '7d' }),
        (err: unknown) => jobError(400)(err) && (err as JobError).param === 'completion_window',
      );
      const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
      for (const metadata of [['a'], tooMany, { k: 'v'.repeat(513) }, { ['k'.repeat(65)]: 'v' }, { k: 5 }]) {
        await assert.rejects(
          b.createBatch(ALICE, {
            input_file_id: file.id,
            endpoint: EMBEDDINGS,
            completion_window: '24h',
            metadata: metadata as unknown as Record<string, string>,
          }),
          (err: unknown) => jobError(400)(err) && (err as JobError).param === 'metadata',
          JSON.stringify(metadata).slice(0, 60),
        );
      }
    });

    it('records a result exactly once, however often the item ran', async () => {
      const batch = await batchOf(ALICE, 1);
      const first = (await b.claim('w1', 1, SHORT_LEASE_MS))[0];
      assert.ok(first !== undefined);
      assert.deepEqual(await b.claim('w2', 1, SHORT_LEASE_MS), [], 'not handed out while leased');
      const again = await claimOne('w2', LONG_LEASE_MS); // after the first lease expired
      assert.equal(again.id, first.id);
      assert.equal(again.attempts, 2);
      assert.equal(await b.record(again, { status: 200, body: 'second' }), 'last');
      assert.equal(await b.record(first, { status: 200, body: 'first' }), 'duplicate');
      assert.equal(await b.fail(first, { code: 'request_failed', message: 'late' }), 'duplicate');
      assert.deepEqual((await b.getBatch(ALICE, batch.id)).request_counts, {
        total: 1,
        completed: 1,
        failed: 0,
      });
      await b.finalize(batch.id);
      const done = await b.getBatch(ALICE, batch.id);
      assert.deepEqual(
        (await linesOf(b, ALICE, done.output_file_id)).map((l) => l.response?.body),
        ['second'],
      );
      assert.equal(done.error_file_id, null);
    });

    it('gives an item back with retryLater and hands it out again no sooner than the delay', async () => {
      const batch = await batchOf(ALICE, 1);
      const [item] = await b.claim('w1', 1, LONG_LEASE_MS);
      assert.ok(item !== undefined);
      assert.equal(await b.retryLater(item, 'w2', 0), false, 'only the lease holder gives it back');
      const givenBack = performance.now();
      assert.equal(await b.retryLater(item, 'w1', RETRY_DELAY_MS), true);
      assert.deepEqual(await b.claim('w1', 1, LONG_LEASE_MS), [], 'not before the delay');
      const again = await claimOne('w1', LONG_LEASE_MS);
      const waited = performance.now() - givenBack;
      assert.ok(waited >= RETRY_DELAY_MS - 20, `handed out again after ${waited.toFixed(0)} ms`);
      assert.equal(again.id, item.id);
      assert.equal(again.attempts, 2);
      assert.equal(await b.record(again, { status: 200, body: null }), 'last');
      assert.equal(await b.retryLater(again, 'w1', 0), false, 'a finished item stays finished');
      await b.finalize(batch.id);
      assert.deepEqual((await b.getBatch(ALICE, batch.id)).request_counts, {
        total: 1,
        completed: 1,
        failed: 0,
      });
    });

    it('runs an item handed back on its last attempt (a drain) again instead of failing it as poison', async () => {
      const batch = await batchOf(ALICE, 1);
      const item = await claimOne('draining', LONG_LEASE_MS);
      assert.equal(item.attempts, 1);
      assert.equal(await b.retryLater(item, 'draining', 0), true);
      // One attempt allowed, and it was used by the claim handed back: a sweep must leave the item be.
      await b.sweep(1);
      const again = await claimOne('restarted', LONG_LEASE_MS);
      assert.equal(again.id, item.id);
      assert.equal(await b.record(again, { status: 200, body: { ok: true } }), 'last');
      await b.finalize(batch.id);
      assert.deepEqual((await b.getBatch(ALICE, batch.id)).request_counts, {
        total: 1,
        completed: 1,
        failed: 0,
      });
    });

    it('hands an item out with its body as uploaded: a 64-bit seed keeps every digit', async () => {
      const body = '{"model": "sim-embed", "input": "x", "seed": 9007199254740993}';
      const file = await b.createFile(ALICE, {
        filename: 'seed.jsonl',
        purpose: 'batch',
        content: `{"custom_id":"s","method":"POST","url":"${EMBEDDINGS}","body":${body}}\n`,
      });
      await b.createBatch(ALICE, { input_file_id: file.id, endpoint: EMBEDDINGS, completion_window: '24h' });
      const item = await claimOne('w1', LONG_LEASE_MS);
      assert.equal(item.body, body);
    });

    it('cancels at once when nothing is in flight', async () => {
      const { id } = await batchOf(ALICE, 3);
      const cancelled = await b.cancelBatch(ALICE, id);
      assert.equal(cancelled.status, 'cancelled');
      assert.ok(cancelled.cancelling_at !== null && cancelled.cancelled_at !== null);
      assert.deepEqual(cancelled.request_counts, { total: 3, completed: 0, failed: 3 });
      assert.equal(cancelled.output_file_id, null);
      assert.deepEqual(
        (await linesOf(b, ALICE, cancelled.error_file_id)).map((l) => [l.custom_id, l.error?.code]),
        [
          ['req-0', 'batch_cancelled'],
          ['req-1', 'batch_cancelled'],
          ['req-2', 'batch_cancelled'],
        ],
      );
      assert.deepEqual(await b.claim('w1', 10, LONG_LEASE_MS), []);
      await assert.rejects(b.cancelBatch(ALICE, id), jobError(409, 'batch_not_cancellable'));
    });

    it('stays cancelling while an item is in flight, keeps its result, then ends cancelled', async () => {
      const { id } = await batchOf(ALICE, 3);
      const [running] = await b.claim('w1', 1, LONG_LEASE_MS);
      assert.ok(running !== undefined);
      const cancelling = await b.cancelBatch(ALICE, id);
      assert.equal(cancelling.status, 'cancelling');
      assert.deepEqual(cancelling.request_counts, { total: 3, completed: 0, failed: 2 });
      assert.equal((await b.cancelBatch(ALICE, id)).status, 'cancelling', 'a second cancel is harmless');
      assert.deepEqual(await b.claim('w2', 10, LONG_LEASE_MS), [], 'nothing more is handed out');
      await b.sweep(3);
      assert.equal(await status(ALICE, id), 'cancelling', 'a sweep waits for the item in flight');
      assert.equal(await b.record(running, { status: 200, body: { ok: true } }), 'recorded');
      const done = await b.getBatch(ALICE, id);
      assert.equal(done.status, 'cancelled');
      assert.deepEqual(done.request_counts, { total: 3, completed: 1, failed: 2 });
      assert.deepEqual(
        (await linesOf(b, ALICE, done.output_file_id)).map((l) => l.custom_id),
        ['req-0'],
      );
      assert.deepEqual(
        (await linesOf(b, ALICE, done.error_file_id)).map((l) => [l.custom_id, l.error?.code]),
        [
          ['req-1', 'batch_cancelled'],
          ['req-2', 'batch_cancelled'],
        ],
      );
    });

    it('ends a cancelling batch whose worker died once the lease runs out', async () => {
      const { id } = await batchOf(ALICE, 2);
      assert.equal((await b.claim('dead', 1, SHORT_LEASE_MS)).length, 1);
      assert.equal((await b.cancelBatch(ALICE, id)).status, 'cancelling');
      await eventually(
        'the cancel to finish',
        async () => {
          await b.sweep(3);
          return status(ALICE, id);
        },
        (s) => s === 'cancelled',
      );
      const done = await b.getBatch(ALICE, id);
      assert.deepEqual(done.request_counts, { total: 2, completed: 0, failed: 2 });
      assert.deepEqual(
        (await linesOf(b, ALICE, done.error_file_id)).map((l) => [l.custom_id, l.error?.code]),
        [
          ['req-0', 'batch_cancelled'],
          ['req-1', 'batch_cancelled'],
        ],
      );
    });

    it('cancels, not poisons, the item whose worker died on its last attempt in a cancelling batch', async () => {
      const { id } = await batchOf(ALICE, 2);
      const item = await claimOne('dead', SHORT_LEASE_MS);
      assert.equal(item.attempts, 1);
      assert.equal((await b.cancelBatch(ALICE, id)).status, 'cancelling');
      // One attempt allowed: the expired lease has used it up, but the batch was cancelled first.
      await eventually(
        'the cancel to finish',
        async () => {
          await b.sweep(1);
          return status(ALICE, id);
        },
        (s) => s === 'cancelled',
      );
      const done = await b.getBatch(ALICE, id);
      assert.deepEqual(
        (await linesOf(b, ALICE, done.error_file_id)).map((l) => [l.custom_id, l.error?.code]),
        [
          ['req-0', 'batch_cancelled'],
          ['req-1', 'batch_cancelled'],
        ],
      );
    });

    it('expires a batch past its completion window, failing what is unfinished and discarding late results', async () => {
      const batch = await batchOf(ALICE, 3, '1s');
      assert.equal(batch.expires_at - batch.created_at, 1);
      const [finished] = await b.claim('w1', 1, LONG_LEASE_MS);
      assert.equal(await b.record(finished!, { status: 200, body: 1 }), 'recorded');
      const [late] = await b.claim('w1', 1, LONG_LEASE_MS);
      assert.ok(late !== undefined);
      await eventually(
        'the batch to expire',
        async () => {
          await b.sweep(3);
          return status(ALICE, batch.id);
        },
        (s) => s === 'expired',
      );
      const expired = await b.getBatch(ALICE, batch.id);
      assert.ok(expired.expired_at !== null);
      assert.deepEqual(expired.request_counts, { total: 3, completed: 1, failed: 2 });
      assert.equal(await b.record(late, { status: 200, body: 2 }), 'duplicate');
      assert.deepEqual(expired.request_counts, (await b.getBatch(ALICE, batch.id)).request_counts);
      assert.deepEqual(
        (await linesOf(b, ALICE, expired.output_file_id)).map((l) => l.custom_id),
        ['req-0'],
      );
      assert.deepEqual(
        (await linesOf(b, ALICE, expired.error_file_id)).map((l) => [l.custom_id, l.error?.code]),
        [
          ['req-1', 'batch_expired'],
          ['req-2', 'batch_expired'],
        ],
      );
      assert.deepEqual(await b.claim('w1', 10, LONG_LEASE_MS), []);
      await assert.rejects(b.cancelBatch(ALICE, batch.id), jobError(409));
    });

    it('fails an item whose attempts are used up instead of running it forever', async () => {
      const { id } = await batchOf(ALICE, 1);
      for (let attempt = 1; attempt <= 3; attempt++) {
        const item = await claimOne(`w${attempt}`, SHORT_LEASE_MS);
        assert.equal(item.attempts, attempt);
      }
      await b.sweep(3);
      assert.equal(await status(ALICE, id), 'in_progress', 'not before the last lease runs out');
      await eventually(
        'the poison item to fail',
        async () => {
          await b.sweep(3);
          return status(ALICE, id);
        },
        (s) => s === 'completed',
      );
      const done = await b.getBatch(ALICE, id);
      assert.deepEqual(done.request_counts, { total: 1, completed: 0, failed: 1 });
      assert.deepEqual(
        (await linesOf(b, ALICE, done.error_file_id)).map((l) => [l.custom_id, l.response, l.error?.code]),
        [['req-0', null, 'max_attempts_exceeded']],
      );
    });

    it('deletes an upload only once no unfinished batch reads it; output and error files any time', async () => {
      const unused = await upload(ALICE, 1);
      assert.deepEqual(await b.deleteFile(ALICE, unused), { id: unused, object: 'file', deleted: true });
      await assert.rejects(b.getFile(ALICE, unused), jobError(404));
      await assert.rejects(b.fileContent(ALICE, unused), jobError(404));
      await assert.rejects(b.deleteFile(ALICE, unused), jobError(404));
      await assert.rejects(
        b.createBatch(ALICE, { input_file_id: unused, endpoint: EMBEDDINGS, completion_window: '24h' }),
        jobError(404),
      );

      const batch = await batchOf(ALICE, 1);
      const input = batch.input_file_id;
      await assert.rejects(b.deleteFile(ALICE, input), jobError(409, 'file_in_use'), 'validating');
      const [item] = await b.claim('w1', 1, LONG_LEASE_MS);
      await assert.rejects(b.deleteFile(ALICE, input), jobError(409, 'file_in_use'), 'in_progress');
      assert.equal(await b.record(item!, { status: 200, body: null }), 'last');
      await assert.rejects(b.deleteFile(ALICE, input), jobError(409, 'file_in_use'), 'finalizing');
      await b.finalize(batch.id);
      assert.equal(await b.getFile(ALICE, input).then((f) => f.id), input, 'a refused delete keeps the file');
      assert.deepEqual(await b.deleteFile(ALICE, input), { id: input, object: 'file', deleted: true });

      const done = await b.getBatch(ALICE, batch.id);
      const outputId = done.output_file_id!;
      await assert.rejects(b.deleteFile(BOB, outputId), jobError(404));
      assert.deepEqual(await b.deleteFile(ALICE, outputId), { id: outputId, object: 'file', deleted: true });
      await assert.rejects(b.fileContent(ALICE, outputId), jobError(404));
      assert.equal((await b.getBatch(ALICE, batch.id)).status, 'completed');

      const cancelled = await batchOf(ALICE, 2);
      await b.cancelBatch(ALICE, cancelled.id);
      const ended = await b.getBatch(ALICE, cancelled.id);
      assert.deepEqual(await b.deleteFile(ALICE, ended.error_file_id!), {
        id: ended.error_file_id,
        object: 'file',
        deleted: true,
      });
      assert.deepEqual(await b.deleteFile(ALICE, cancelled.input_file_id), {
        id: cancelled.input_file_id,
        object: 'file',
        deleted: true,
      });
      assert.deepEqual((await b.listFiles(ALICE)).data, []);
    });

    it('lists files and batches of one owner, newest first, page by page', async () => {
      const empty = await b.listFiles(ALICE);
      assert.deepEqual(empty, { object: 'list', data: [], first_id: null, last_id: null, has_more: false });
      assert.deepEqual(await b.listBatches(ALICE), empty);

      const files = [await upload(ALICE, 1), await upload(ALICE, 1), await upload(ALICE, 1)];
      const bobs = await upload(BOB, 1);
      const page1 = await b.listFiles(ALICE, { limit: 2 });
      assert.deepEqual(
        page1.data.map((f) => f.id),
        [files[2], files[1]],
      );
      assert.equal(page1.object, 'list');
      assert.equal(page1.first_id, files[2]);
      assert.equal(page1.last_id, files[1]);
      assert.equal(page1.has_more, true);
      const page2 = await b.listFiles(ALICE, { limit: 2, after: page1.last_id });
      assert.deepEqual(
        page2.data.map((f) => f.id),
        [files[0]],
      );
      assert.equal(page2.has_more, false);
      assert.deepEqual(
        (await b.listFiles(ALICE)).data.map((f) => f.id),
        [...files].reverse(),
      );
      assert.deepEqual(
        (await b.listFiles(BOB)).data.map((f) => f.id),
        [bobs],
      );

      const batches: string[] = [];
      for (let i = 0; i < 3; i++) {
        batches.push(
          (
            await b.createBatch(ALICE, {
              input_file_id: files[0]!,
              endpoint: EMBEDDINGS,
              completion_window: '24h',
            })
          ).id,
        );
      }
      await b.createBatch(BOB, { input_file_id: bobs, endpoint: EMBEDDINGS, completion_window: '24h' });
      const first = await b.listBatches(ALICE, { limit: 2 });
      assert.deepEqual(
        first.data.map((x) => x.id),
        [batches[2], batches[1]],
      );
      assert.equal(first.first_id, batches[2]);
      assert.equal(first.has_more, true);
      const second = await b.listBatches(ALICE, { limit: 2, after: first.last_id! });
      assert.deepEqual(
        second.data.map((x) => x.id),
        [batches[0]],
      );
      assert.equal(second.has_more, false);
      assert.equal((await b.listBatches(BOB)).data.length, 1);
    });

    it('goes on after a deleted file named by `after`, and refuses an `after` that names nothing', async () => {
      const files: string[] = [];
      for (let i = 0; i < 7; i++) files.push(await upload(ALICE, 1));
      const bobs = await upload(BOB, 1);
      // What an SDK's "delete every file" loop does: delete a page, then ask for the one after its last id.
      const deleted: string[] = [];
      let after: string | undefined;
      for (;;) {
        const page = await b.listFiles(ALICE, after === undefined ? { limit: 3 } : { limit: 3, after });
        for (const f of page.data) {
          await b.deleteFile(ALICE, f.id);
          deleted.push(f.id);
        }
        if (!page.has_more) break;
        after = page.last_id!;
      }
      assert.deepEqual(deleted, [...files].reverse());
      assert.deepEqual((await b.listFiles(ALICE)).data, []);
      // A deleted file's place still works as a cursor, also once newer files exist.
      const newer = await upload(ALICE, 1);
      assert.deepEqual((await b.listFiles(ALICE, { after: files[6] })).data, []);
      assert.deepEqual(
        (await b.listFiles(ALICE)).data.map((f) => f.id),
        [newer],
      );
      const param = (err: unknown): boolean => {
        jobError(400, 'invalid_request')(err);
        assert.equal((err as JobError).param, 'after');
        assert.match((err as JobError).message, /"after"/);
        return true;
      };
      await assert.rejects(b.listFiles(ALICE, { after: 'file-never-was' }), param);
      await assert.rejects(b.listFiles(ALICE, { after: bobs }), param, "another owner's file");
      await b.deleteFile(BOB, bobs);
      await assert.rejects(b.listFiles(ALICE, { after: bobs }), param, "another owner's deleted file");
      assert.deepEqual((await b.listFiles(BOB, { after: bobs })).data, []);
      await assert.rejects(b.listBatches(ALICE, { after: 'batch_never_was' }), param);
      const batch = await batchOf(BOB, 1);
      await assert.rejects(b.listBatches(ALICE, { after: batch.id }), param, "another owner's batch");
      assert.deepEqual((await b.listBatches(BOB, { after: batch.id })).data, []);
    });

    it("hands each item out with its batch's origin: host and route headers, localhost by default", async () => {
      const fileId = await upload(ALICE, 2);
      const params = { input_file_id: fileId, endpoint: EMBEDDINGS, completion_window: '24h' };
      const withOrigin = await b.createBatch(ALICE, params, {
        host: 'api.example.com',
        headers: ['x-team', 'blue', 'x-region', 'eu'],
      });
      assert.equal('host' in withOrigin || 'headers' in withOrigin, false, 'not part of the batch object');
      const plain = await b.createBatch(ALICE, params);
      const items = await eventually(
        'four items',
        async () => b.claim('w1', 4, LONG_LEASE_MS),
        (got) => got.length === 4,
      );
      for (const item of items) {
        if (item.batchId === withOrigin.id) {
          assert.equal(item.host, 'api.example.com');
          assert.deepEqual(item.headers, ['x-team', 'blue', 'x-region', 'eu']);
        } else {
          assert.equal(item.batchId, plain.id);
          assert.equal(item.host, 'localhost');
          assert.deepEqual(item.headers, []);
        }
      }
      const got = await b.getBatch(ALICE, withOrigin.id);
      assert.equal('host' in got || 'headers' in got, false);
      const listed = (await b.listBatches(ALICE)).data[1]!;
      assert.equal('host' in listed || 'headers' in listed, false);
    });

    it('reports work and backlog until every batch has ended', async () => {
      assert.equal(await b.hasWork(), false);
      assert.equal(await b.backlog(), 0);
      const { id } = await batchOf(ALICE, 3);
      assert.equal(await b.hasWork(), true);
      assert.equal(await b.backlog(), 3);
      const [a, c] = await b.claim('w1', 2, LONG_LEASE_MS);
      assert.equal(await b.backlog(), 3, 'leased items are still backlog');
      await b.record(a!, { status: 200, body: null });
      assert.equal(await b.backlog(), 2);
      assert.equal((await b.cancelBatch(ALICE, id)).status, 'cancelling');
      assert.equal(await b.backlog(), 1, 'the pending item was failed by the cancel');
      assert.equal(await b.hasWork(), true);
      await b.record(c!, { status: 200, body: null });
      assert.equal(await b.backlog(), 0);
      assert.equal(await b.hasWork(), false);
    });
  });
}
