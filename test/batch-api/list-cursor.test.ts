/**
 * List cursors through the official `openai` SDK against a real Sluice, on the SQLite and the Redis
 * store: the SDK's "delete every file" loop (it asks for the next page after the last id of the
 * page it just deleted) deletes every file, and an `after` that names nothing is a 400
 * `invalid_request_error` naming the parameter, never an empty last page.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

function describeCursors(store: 'sqlite' | 'redis', skip: string | false = false): void {
  describe(`list cursors through the openai SDK (${store})`, { timeout: 30_000, skip }, () => {
    let fleet: SimFleet;
    let redis: TestRedis | null = null;
    let t: TestSluice;
    let client: OpenAI;

    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      let jobs = 'store: sqlite, path: cursors.db';
      if (store === 'redis') {
        redis = await startRedis();
        jobs = `store: redis, redis: { url: ${redis.url} }`;
      }
      t = await startTestSluice(basicConfig(fleet.urls, `batch_api:\n  jobs: { ${jobs} }\n`));
      client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    });

    after(async () => {
      await t?.close();
      await fleet?.close();
      await redis?.stop();
    });

    async function upload(i: number): Promise<string> {
      const line = {
        custom_id: 'a',
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: 'e', input: `${i}` },
      };
      const f = await client.files.create({
        file: await toFile(Buffer.from(JSON.stringify(line) + '\n'), `in-${i}.jsonl`),
        purpose: 'batch',
      });
      return f.id;
    }

    /** Asserts the SDK call is refused with a 400 invalid_request_error whose param is `after`. */
    async function refusesAfter(call: () => Promise<unknown>): Promise<void> {
      await assert.rejects(call(), (err: unknown) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `expected a 400, got ${String(err)}`);
        assert.equal(err.status, 400);
        assert.equal(err.type, 'invalid_request_error');
        assert.equal(err.param, 'after');
        assert.match(err.message, /"after"/);
        return true;
      });
    }

    it('deletes every file with the SDK loop over pages of 3', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push(await upload(i));
      const deleted: string[] = [];
      for await (const f of client.files.list({ limit: 3 })) {
        await client.files.delete(f.id);
        deleted.push(f.id);
      }
      assert.deepEqual(deleted, [...ids].reverse(), 'all 7, newest first');
      const left = await client.files.list();
      assert.deepEqual(left.data, []);
      assert.equal(left.has_more, false);
    });

    it('answers 400 naming `after` for a cursor that never existed', async () => {
      await upload(99);
      await refusesAfter(() => client.files.list({ after: 'file-never-existed' }));
      await refusesAfter(() => client.batches.list({ after: 'batch_never_existed' }));
    });

    it('pages batches to the end with the SDK', async () => {
      const fileId = await upload(100);
      const created: string[] = [];
      for (let i = 0; i < 5; i++) {
        const b = await client.batches.create({
          input_file_id: fileId,
          endpoint: '/v1/embeddings',
          completion_window: '24h',
        });
        created.push(b.id);
      }
      const listed: string[] = [];
      for await (const b of client.batches.list({ limit: 2 })) listed.push(b.id);
      assert.deepEqual(listed, [...created].reverse());
    });
  });
}

describeCursors('sqlite');
describeCursors('redis', redisSkip());
