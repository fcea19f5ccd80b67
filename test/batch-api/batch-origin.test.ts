/**
 * Batch items match routes as the caller's own requests do: a synchronous batch's items are sent to
 * the batch request's Host (and carry its headers); a durable batch keeps the creating request's
 * Host and the headers routes match on (never its credentials or cookies) and replays them on every
 * item, on the SQLite and the Redis store. Real Sluice, a scripted node that records what it got.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import { createClient } from 'redis';
import { request } from 'undici';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const HOST = 'api.example.com';
const SECRET = 'Bearer secret-token-never-stored';
const COOKIE = 'session=cookie-never-stored';

function config(node: string, jobs: string): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: embeddings
    match: { path: /v1/embeddings, methods: [POST], host: ${HOST} }
    pool: gpu
  - name: completions-blue
    match: { path: /v1/completions, headers: { x-team: blue } }
    pool: gpu
batch_api:
  jobs: { ${jobs}, poll_ms: 20, retry_base_ms: 10 }
`;
}

interface Line {
  custom_id: string;
  response: { status_code: number; body: { error?: { code: string } } } | null;
}

function describeOrigin(store: 'sqlite' | 'redis', skip: string | false = false): void {
  describe(
    `batch items keep the caller's Host and route headers (${store})`,
    { timeout: 30_000, skip },
    () => {
      let node: ScriptedNode;
      let redis: TestRedis | null = null;
      let t: TestSluice;
      const seen: { path: string; headers: IncomingHttpHeaders }[] = [];

      before(async () => {
        node = await startScriptedNode((req, res) => {
          seen.push({ path: req.url ?? '', headers: req.headers });
          req.resume();
          req.on('end', () => {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(
              req.url === '/v1/embeddings'
                ? '{"object":"list","data":[{"index":0,"embedding":[0.5]}]}'
                : '{"object":"text_completion","choices":[{"index":0,"text":"ok"}]}',
            );
          });
        });
        let jobs = 'store: sqlite, path: jobs10.db';
        if (store === 'redis') {
          redis = await startRedis();
          jobs = `store: redis, redis: { url: ${redis.url}, key_prefix: "origin:" }`;
        }
        t = await startTestSluice(config(node.url, jobs));
      });

      after(async () => {
        await t?.close();
        await node?.close();
        await redis?.stop();
      });

      async function post(
        path: string,
        body: unknown,
        headers: Record<string, string>,
      ): Promise<{ status: number; json: Record<string, unknown> }> {
        const r = await request(`${t.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
        });
        return { status: r.statusCode, json: (await r.body.json()) as Record<string, unknown> };
      }

      async function upload(url: string, n: number): Promise<string> {
        let text = '';
        for (let i = 0; i < n; i++) {
          const body =
            url === '/v1/embeddings' ? { model: 'e', input: `x${i}` } : { model: 'c', prompt: `p${i}` };
          text += JSON.stringify({ custom_id: `r-${i}`, method: 'POST', url, body }) + '\n';
        }
        const form = new FormData();
        form.append('purpose', 'batch');
        form.append('file', new Blob([text]), 'in.jsonl');
        const r = await fetch(`${t.url}/v1/files`, { method: 'POST', body: form });
        assert.equal(r.status, 200);
        return ((await r.json()) as { id: string }).id;
      }

      /** Creates a durable batch with `headers`, waits for it to end and returns its output and error lines. */
      async function durable(
        url: string,
        headers: Record<string, string>,
      ): Promise<{ output: Line[]; errors: Line[] }> {
        const fileId = await upload(url, 2);
        const created = await post(
          '/v1/batches',
          { input_file_id: fileId, endpoint: url, completion_window: '24h' },
          headers,
        );
        assert.equal(created.status, 200, JSON.stringify(created.json));
        let batch: Record<string, unknown> = created.json;
        await waitFor(
          async () => {
            batch = (await (
              await fetch(`${t.url}/v1/batches/${String(created.json['id'])}`)
            ).json()) as Record<string, unknown>;
            return batch['status'] === 'completed';
          },
          20_000,
          'the batch to complete',
        );
        const lines = async (id: unknown): Promise<Line[]> =>
          typeof id !== 'string'
            ? []
            : (await (await fetch(`${t.url}/v1/files/${id}/content`)).text())
                .split('\n')
                .filter((l) => l !== '')
                .map((l) => JSON.parse(l) as Line);
        return { output: await lines(batch['output_file_id']), errors: await lines(batch['error_file_id']) };
      }

      it('routes a direct request by Host (control)', async () => {
        const r = await post('/v1/embeddings', { model: 'm', input: 'x' }, { host: HOST });
        assert.equal(r.status, 200);
        const other = await post('/v1/embeddings', { model: 'm', input: 'x' }, {});
        assert.equal(other.status, 404);
      });

      it("sends a synchronous batch's items to the batch request's Host", async () => {
        const body = { endpoint: '/v1/embeddings', items: [{ model: 'm', input: 'x' }] };
        const r = await post('/v1/batch', body, { host: HOST });
        assert.equal(r.status, 200);
        const [item] = r.json['results'] as { status: string; status_code: number }[];
        assert.deepEqual([item?.status, item?.status_code], ['succeeded', 200]);
        const elsewhere = await post('/v1/batch', body, {});
        const [miss] = elsewhere.json['results'] as { status_code: number; error: { code: string } }[];
        assert.deepEqual([miss?.status_code, miss?.error.code], [404, 'route_not_found']);
        const blue = await post(
          '/v1/batch',
          { endpoint: '/v1/completions', items: [{ model: 'c', prompt: 'p' }] },
          { 'x-team': 'blue' },
        );
        assert.equal((blue.json['results'] as { status_code: number }[])[0]?.status_code, 200);
      });

      it("runs a durable batch's items with the creating request's Host", async () => {
        const { output, errors } = await durable('/v1/embeddings', { host: HOST });
        assert.deepEqual(
          output.map((l) => [l.custom_id, l.response?.status_code]),
          [
            ['r-0', 200],
            ['r-1', 200],
          ],
        );
        assert.deepEqual(errors, []);
        // Created on another host, the items miss the host-matched route, as a direct request would.
        const other = await durable('/v1/embeddings', {});
        assert.deepEqual(other.output, []);
        assert.deepEqual(
          other.errors.map((l) => [l.response?.status_code, l.response?.body.error?.code]),
          [
            [404, 'route_not_found'],
            [404, 'route_not_found'],
          ],
        );
      });

      it('replays the headers routes match on, never credentials or cookies', async () => {
        seen.length = 0;
        const { output } = await durable('/v1/completions', {
          'x-team': 'blue',
          'x-unrelated': 'not-kept',
          authorization: SECRET,
          cookie: COOKIE,
        });
        assert.equal(output.length, 2);
        assert.equal(seen.length, 2);
        for (const s of seen) {
          assert.equal(s.path, '/v1/completions');
          assert.equal(s.headers['x-team'], 'blue');
          assert.equal(s.headers['authorization'], undefined);
          assert.equal(s.headers['cookie'], undefined);
          assert.equal(s.headers['x-unrelated'], undefined, 'only headers some route matches on are kept');
        }
        const stored = await storeText();
        assert.ok(stored.includes('x-team'), 'the store holds the route header');
        assert.ok(
          !stored.includes('secret-token-never-stored'),
          'the store never holds the Authorization value',
        );
        assert.ok(!stored.includes('cookie-never-stored'), 'nor the cookie');
      });

      /** Everything the job store holds, as text. */
      async function storeText(): Promise<string> {
        if (store === 'sqlite') {
          const path = join(dirname(t.configPath), 'jobs10.db');
          const parts = await Promise.all(
            [path, `${path}-wal`].map((p) =>
              readFile(p).then(
                (b) => b.toString('latin1'),
                () => '',
              ),
            ),
          );
          return parts.join('');
        }
        const raw = createClient({ url: redis!.url });
        await raw.connect();
        try {
          let out = '';
          for await (const keys of raw.scanIterator({ MATCH: 'origin:*', COUNT: 1000 })) {
            for (const k of keys) {
              const type = await raw.type(k);
              if (type === 'hash') out += JSON.stringify(await raw.hGetAll(k));
            }
          }
          return out;
        } finally {
          raw.destroy();
        }
      }
    },
  );
}

describeOrigin('sqlite');
describeOrigin('redis', redisSkip());
