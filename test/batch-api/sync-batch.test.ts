/**
 * `POST /v1/batch` through a real Sluice in front of real simulated nodes: results in input order
 * and matching their inputs, failure isolation, request-level validation, the concurrency cap,
 * per-item tenant limits, abandonment when the client leaves, Idempotency-Key, and 2xx answers
 * without a JSON object counted failed.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { expectedEmbedding } from '../../loadtest/sim/outputs.js';
import { startRecordingNode, startScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const DIM = 64; // embedding_dim of the `fast` profile

interface ItemResult {
  index: number;
  custom_id: string | null;
  status: 'succeeded' | 'failed';
  status_code: number | null;
  body: { data?: { embedding: number[] }[]; error?: { message: string } } | null;
  error: { message: string; type: string; code: string | null } | null;
  attempts: number;
  latency_ms: number;
}

interface BatchResult {
  object: string;
  endpoint: string;
  results: ItemResult[];
  request_counts: { total: number; succeeded: number; failed: number };
}

function config(nodes: readonly string[], extra = '', sync = 'max_items: 50'): string {
  return basicConfig(nodes, `batch_api:\n  sync: { ${sync} }\n${extra}`);
}

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; json: unknown; text: string }> {
  const r = await fetch(`${url}/v1/batch`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: r.status, headers: r.headers, json, text };
}

function embeddingItems(n: number, prefix = 'text'): { custom_id: string; model: string; input: string }[] {
  return Array.from({ length: n }, (_, i) => ({
    custom_id: `c-${i}`,
    model: 'sim-embed',
    input: `${prefix} ${i}`,
  }));
}

describe('POST /v1/batch', () => {
  let fleet: SimFleet;
  let proxy: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    proxy = await startTestSluice(config(fleet.urls));
  });
  after(async () => {
    await proxy?.close();
    await fleet?.close();
  });

  it('answers every item in input order, each result computed from its own input', async () => {
    const items = embeddingItems(20);
    const r = await post(proxy.url, { endpoint: '/v1/embeddings', items });
    assert.equal(r.status, 200, r.text);
    const b = r.json as BatchResult;
    assert.equal(b.object, 'batch.result');
    assert.deepEqual(b.request_counts, { total: 20, succeeded: 20, failed: 0 });
    b.results.forEach((res, i) => {
      assert.equal(res.index, i);
      assert.equal(res.custom_id, `c-${i}`);
      assert.equal(res.status, 'succeeded');
      assert.equal(res.status_code, 200);
      assert.equal(res.attempts, 1);
      assert.ok(res.latency_ms > 0);
      assert.deepEqual(res.body?.data?.[0]?.embedding, expectedEmbedding(`text ${i}`, DIM));
    });
  });

  it('keeps items without custom_id, reporting custom_id null', async () => {
    const r = await post(proxy.url, {
      endpoint: '/v1/embeddings',
      items: [{ model: 'sim-embed', input: 'x' }],
    });
    assert.equal(r.status, 200, r.text);
    assert.equal((r.json as BatchResult).results[0]?.custom_id, null);
  });

  it('fails only the bad item, with the node’s status and error, and still answers 200', async () => {
    const items: Record<string, unknown>[] = embeddingItems(5);
    items[2] = { custom_id: 'bad', model: 'sim-embed' }; // no input: the node answers 400
    const r = await post(proxy.url, { endpoint: '/v1/embeddings', items });
    assert.equal(r.status, 200, r.text);
    const b = r.json as BatchResult;
    assert.deepEqual(b.request_counts, { total: 5, succeeded: 4, failed: 1 });
    const bad = b.results[2]!;
    assert.equal(bad.custom_id, 'bad');
    assert.equal(bad.status, 'failed');
    assert.equal(bad.status_code, 400);
    assert.match(bad.error?.message ?? '', /input/);
    for (const i of [0, 1, 3, 4]) {
      assert.deepEqual(b.results[i]?.body?.data?.[0]?.embedding, expectedEmbedding(`text ${i}`, DIM));
    }
  });

  it('refuses a malformed batch as a whole with 400 naming the field', async () => {
    const cases: [unknown, string | null, RegExp][] = [
      ['{not json', null, /not valid JSON/],
      [{ items: embeddingItems(1) }, 'endpoint', /endpoint/],
      [{ endpoint: '/v1/models', items: embeddingItems(1) }, 'endpoint', /\/v1\/models/],
      [{ endpoint: '/v1/embeddings', items: [] }, 'items', /non-empty/],
      [{ endpoint: '/v1/embeddings', items: embeddingItems(51) }, 'items', /at most 50/],
      [{ endpoint: '/v1/embeddings', items: [1] }, 'items[0]', /JSON object/],
      [{ endpoint: '/v1/embeddings', items: [{ custom_id: 7, input: 'a' }] }, 'items[0].custom_id', /string/],
      [
        {
          endpoint: '/v1/embeddings',
          items: [
            { custom_id: 'a', input: 'x' },
            { custom_id: 'a', input: 'y' },
          ],
        },
        'items[1].custom_id',
        /repeats/,
      ],
      [
        { endpoint: '/v1/chat/completions', items: [{ model: 'm', messages: [], stream: true }] },
        'items[0].stream',
        /stream/,
      ],
    ];
    for (const [body, param, message] of cases) {
      const r = await post(proxy.url, body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)} → ${r.text}`);
      const e = (r.json as { error: { param: string | null; message: string; code: string } }).error;
      assert.equal(e.code, 'invalid_batch');
      assert.equal(e.param, param);
      assert.match(e.message, message);
    }
  });

  it('answers 405 with Allow for another method and 404 below /v1/batch', async () => {
    const get = await fetch(`${proxy.url}/v1/batch`);
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST');
    const deeper = await fetch(`${proxy.url}/v1/batch/x`, { method: 'POST' });
    assert.equal(deeper.status, 404);
  });

  it('replays a retried request with the same Idempotency-Key without running it again', async () => {
    const body = { endpoint: '/v1/embeddings', items: embeddingItems(3, 'idem') };
    const calls = () => fleet.nodes.reduce((n, node) => n + node.stats().served, 0);
    const first = await post(proxy.url, body, { 'idempotency-key': 'k-replay' });
    assert.equal(first.status, 200);
    const before = calls();
    const second = await post(proxy.url, body, { 'idempotency-key': 'k-replay' });
    assert.equal(second.status, 200);
    assert.equal(second.headers.get('idempotent-replayed'), 'true');
    assert.equal(second.text, first.text);
    assert.equal(calls(), before, 'no item ran again');
  });

  it('answers 409 with x-should-retry false for the same key with another body', async () => {
    await post(
      proxy.url,
      { endpoint: '/v1/embeddings', items: embeddingItems(1, 'a') },
      { 'idempotency-key': 'k-2' },
    );
    const r = await post(
      proxy.url,
      { endpoint: '/v1/embeddings', items: embeddingItems(1, 'b') },
      { 'idempotency-key': 'k-2' },
    );
    assert.equal(r.status, 409);
    assert.equal(r.headers.get('x-should-retry'), 'false');
    assert.equal((r.json as { error: { code: string } }).error.code, 'idempotency_key_reused');
  });

  it('answers 409 for the same key while the first request still runs', async () => {
    const body = { endpoint: '/v1/embeddings', items: embeddingItems(2, 'slow') };
    const headers = { 'idempotency-key': 'k-3', 'x-sim-stall-ms': '400' };
    const first = post(proxy.url, body, headers);
    await waitFor(() => proxy.sluice.stats.inFlight >= 2, 2000, 'the first batch to start');
    const second = await post(proxy.url, body, headers);
    assert.equal(second.status, 409);
    assert.match((second.json as { error: { message: string } }).error.message, /still running/);
    assert.equal((second.json as { error: { code: string } }).error.code, 'idempotency_key_in_progress');
    assert.equal(second.headers.get('x-should-retry'), 'false');
    assert.equal((await first).status, 200);
  });

  it('refuses an empty or oversized Idempotency-Key', async () => {
    const r = await post(
      proxy.url,
      { endpoint: '/v1/embeddings', items: embeddingItems(1) },
      {
        'idempotency-key': 'x'.repeat(256),
      },
    );
    assert.equal(r.status, 400);
    assert.equal((r.json as { error: { code: string } }).error.code, 'invalid_idempotency_key');
    const empty = await post(
      proxy.url,
      { endpoint: '/v1/embeddings', items: embeddingItems(1) },
      { 'idempotency-key': '' },
    );
    assert.equal(empty.status, 400);
    assert.equal((empty.json as { error: { code: string } }).error.code, 'invalid_idempotency_key');
  });

  it('stops the items of a batch whose client left', async () => {
    const body = JSON.stringify({ endpoint: '/v1/embeddings', items: embeddingItems(4, 'gone') });
    const port = new URL(proxy.url).port;
    const req = request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/v1/batch',
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'x-sim-stall-ms': '3000',
      },
    });
    req.on('error', () => {});
    req.end(body);
    await waitFor(() => proxy.sluice.stats.inFlight >= 5, 2000, 'the batch and its items to start');
    const t0 = performance.now();
    req.destroy();
    await waitFor(() => proxy.sluice.stats.inFlight === 0, 2000, 'every item to stop');
    assert.ok(performance.now() - t0 < 2000, 'items stopped before their 3 s stall ended');
  });
});

describe('POST /v1/batch limits', () => {
  let fleet: SimFleet;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });
  after(() => fleet?.close());

  it('runs at most sync.concurrency items at once', async () => {
    const proxy = await startTestSluice(config(fleet.urls, '', 'concurrency: 2'));
    try {
      const t0 = performance.now();
      const r = await post(
        proxy.url,
        { endpoint: '/v1/embeddings', items: embeddingItems(6) },
        { 'x-sim-stall-ms': '100' },
      );
      const elapsed = performance.now() - t0;
      assert.equal(r.status, 200);
      assert.equal((r.json as BatchResult).request_counts.succeeded, 6);
      // Six 100 ms items two at a time take three rounds.
      assert.ok(elapsed >= 300, `took ${elapsed.toFixed(0)} ms`);
    } finally {
      await proxy.close();
    }
  });

  it('applies the tenant’s request limit to each item and needs its key', async () => {
    process.env['SYNC_BATCH_KEY'] = 'sk-sync-batch';
    const proxy = await startTestSluice(
      config(
        fleet.urls,
        `tenants:
  - name: acme
    keys: [{ env: SYNC_BATCH_KEY }]
    limits: { requests_per_minute: 3 }
`,
      ),
    );
    try {
      const body = { endpoint: '/v1/embeddings', items: embeddingItems(5) };
      const anonymous = await post(proxy.url, body);
      assert.equal(anonymous.status, 401);
      assert.equal((anonymous.json as { error: { code: string } }).error.code, 'invalid_api_key');
      const r = await post(proxy.url, body, { authorization: 'Bearer sk-sync-batch' });
      assert.equal(r.status, 200, r.text);
      const b = r.json as BatchResult;
      assert.deepEqual(b.request_counts, { total: 5, succeeded: 3, failed: 2 });
      const refused = b.results.filter((x) => x.status === 'failed');
      for (const x of refused) {
        assert.equal(x.status_code, 429);
        assert.equal(x.error?.code, 'rate_limit_exceeded');
        assert.equal(x.attempts, 0);
      }
    } finally {
      await proxy.close();
    }
  });

  it('answers a 3,000-item batch whose items are refused at once, without deep recursion or leaks', async () => {
    process.env['SYNC_BATCH_FLOOD_KEY'] = 'sk-sync-flood';
    const proxy = await startTestSluice(
      config(
        fleet.urls,
        `tenants:
  - name: flood
    keys: [{ env: SYNC_BATCH_FLOOD_KEY }]
    limits: { requests_per_minute: 1 }
`,
        'max_items: 5000, concurrency: 64',
      ),
    );
    try {
      const r = await post(
        proxy.url,
        { endpoint: '/v1/embeddings', items: embeddingItems(3000) },
        { authorization: 'Bearer sk-sync-flood' },
      );
      assert.equal(r.status, 200, r.text.slice(0, 300));
      const b = r.json as BatchResult;
      assert.deepEqual(b.request_counts, { total: 3000, succeeded: 1, failed: 2999 });
      assert.equal(b.results[2999]?.status_code, 429);
      await waitFor(() => proxy.sluice.stats.inFlight === 0, 2000, 'nothing left in flight');
    } finally {
      await proxy.close();
    }
  });

  it('keeps an anonymous caller’s items off routes that need a key', async () => {
    process.env['SYNC_BATCH_MEMBER_KEY'] = 'sk-member';
    const proxy = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}
routes:
  - name: open-models
    match: { path: /v1/models }
    pool: gpu
    allow_anonymous: true
  - name: keyed
    match: {}
    pool: gpu
tenants:
  - name: member
    keys: [{ env: SYNC_BATCH_MEMBER_KEY }]
  - name: public
    keys: []
anonymous_tenant: public
batch_api:
  allow_anonymous: true
`);
    try {
      const r = await post(proxy.url, { endpoint: '/v1/embeddings', items: embeddingItems(2) });
      assert.equal(r.status, 200, r.text);
      const b = r.json as BatchResult;
      assert.deepEqual(
        b.results.map((x) => [x.status_code, x.error?.code]),
        [
          [401, 'invalid_api_key'],
          [401, 'invalid_api_key'],
        ],
      );
      const member = await post(
        proxy.url,
        { endpoint: '/v1/embeddings', items: embeddingItems(2) },
        { authorization: 'Bearer sk-member' },
      );
      assert.equal((member.json as BatchResult).request_counts.succeeded, 2);
    } finally {
      await proxy.close();
    }
  });
});

describe('POST /v1/batch on a route whose plugin rewrites the body', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let proxy: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    // model-alias rewrites `model` in each item's body: a body of another length than the item's.
    proxy = await startTestSluice(
      basicConfig(
        fleet.urls,
        `batch_api:\n  sync: { max_items: 10 }\nplugins:\n  - name: alias\n    use: model-alias\n    options:\n      aliases:\n        - { public: embed-small, target: sim-embed }\n`,
        { route: '    plugins: [alias]' },
      ),
    );
  });
  after(async () => {
    await proxy?.close();
    await fleet?.close();
  });

  it("answers every item as the node answers the rewritten body (the item's own length is not forwarded)", async () => {
    const items = Array.from({ length: 3 }, (_, i) => ({
      custom_id: `a-${i}`,
      model: 'embed-small',
      input: `x ${i}`,
    }));
    const r = await post(proxy!.url, { endpoint: '/v1/embeddings', items });
    assert.equal(r.status, 200, r.text);
    const b = r.json as BatchResult;
    assert.deepEqual(b.request_counts, { total: 3, succeeded: 3, failed: 0 }, r.text);
    b.results.forEach((res, i) => {
      assert.equal(res.status_code, 200);
      assert.deepEqual(res.body?.data?.[0]?.embedding, expectedEmbedding(`x ${i}`, DIM));
    });
  });
});

describe('POST /v1/batch on a micro-batching route with no node available', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let proxy: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    proxy = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: embed
    nodes: [{ url: ${fleet.urls[0]} }]
routes:
  - name: embeddings
    match: { path: /v1/embeddings }
    pool: embed
    batching: { mode: native, max_batch_size: 4, max_wait_ms: 2, max_attempts: 2 }
batch_api:
  sync: { max_items: 10 }
`);
    const drained = await fetch(`${proxy.adminUrl}/admin/nodes/embed/0/drain`, { method: 'POST' });
    assert.equal(drained.status, 200);
  });
  after(async () => {
    await proxy?.close();
    await fleet?.close();
  });

  it('reports the item as refused by Sluice: 503 no_healthy_upstream, 0 attempts', async () => {
    const r = await post(proxy!.url, { endpoint: '/v1/embeddings', items: embeddingItems(1) });
    assert.equal(r.status, 200, r.text);
    const res = (r.json as BatchResult).results[0]!;
    assert.equal(res.status_code, 503);
    assert.equal(res.error?.code, 'no_healthy_upstream');
    assert.equal(res.attempts, 0, 'no node saw the item');
  });

  it('answers a direct request 503 with Retry-After, as on a route without batching', async () => {
    const r = await fetch(`${proxy!.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-embed', input: 'x' }),
    });
    await r.arrayBuffer();
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '1');
  });
});

describe('synchronous batch items as written', { timeout: 30_000 }, () => {
  it('forwards each item as the client wrote it, only custom_id taken out: a 64-bit seed keeps every digit', async () => {
    const node = await startRecordingNode(200, '{"object":"list","data":[{"index":0,"embedding":[1]}]}');
    const received = node.received;
    const t = await startTestSluice(basicConfig([node.url], 'batch_api:\n  sync: { max_items: 5 }\n')).catch(
      async (e: unknown) => {
        await node.close();
        throw e;
      },
    );
    try {
      const body =
        '{"endpoint":"/v1/embeddings","items":[{"custom_id":"a","model":"e","input":"x","seed":9007199254740993},{"model":"e", "input":"y","custom_id":"b","big":1e400}]}';
      const r = await fetch(`${t.url}/v1/batch`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      assert.equal(r.status, 200, await r.text());
      // The same with a byte order mark before the request body.
      const withBom = await fetch(`${t.url}/v1/batch`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: `\ufeff${body}`,
      });
      assert.equal(withBom.status, 200, await withBom.text());
      assert.equal(received.length, 4);
      for (const x of received.splice(2, 2)) assert.ok(received.includes(x), x);
      assert.deepEqual(received.sort(), [
        '{"model":"e","input":"x","seed":9007199254740993}',
        '{"model":"e","input":"y","big":1e400}',
      ]);
    } finally {
      await t.close();
      await node.close();
    }
  });
});

describe('synchronous batch answers that are not JSON objects', { timeout: 30_000 }, () => {
  it('fails a 2xx whose body is null, an array, a number, a string or not JSON, as the durable path does', async () => {
    const answers: Record<string, [string, string]> = {
      object: ['application/json', '{"object":"list","data":[{"index":0,"embedding":[0.5]}]}'],
      null: ['application/json', 'null'],
      array: ['application/json', '[1]'],
      number: ['application/json', '42'],
      string: ['application/json', '"x"'],
      html: ['text/html', '<html>gateway page</html>'],
      empty: ['application/json', ''],
    };
    const node = await startScriptedNode((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        const [type, body] = answers[(JSON.parse(raw) as { input: string }).input]!;
        res.writeHead(200, { 'content-type': type });
        res.end(body);
      });
    });
    const t = await startTestSluice(basicConfig([node.url], 'batch_api: {}\n')).catch(async (e: unknown) => {
      await node.close();
      throw e;
    });
    try {
      const inputs = Object.keys(answers);
      const r = await post(t.url, {
        endpoint: '/v1/embeddings',
        items: inputs.map((input) => ({ custom_id: input, model: 'e', input })),
      });
      assert.equal(r.status, 200, r.text);
      const b = r.json as BatchResult;
      assert.deepEqual(b.request_counts, { total: 7, succeeded: 1, failed: 6 });
      assert.deepEqual(
        b.results.map((x) => [x.custom_id, x.status, x.status_code, x.error?.code ?? null]),
        [
          ['object', 'succeeded', 200, null],
          ['null', 'failed', 200, 'request_failed'],
          ['array', 'failed', 200, 'request_failed'],
          ['number', 'failed', 200, 'request_failed'],
          ['string', 'failed', 200, 'request_failed'],
          ['html', 'failed', 200, 'request_failed'],
          ['empty', 'failed', 200, 'request_failed'],
        ],
      );
      // The body is still shown as it came.
      assert.deepEqual(
        b.results.slice(1).map((x) => x.body as unknown),
        [null, [1], 42, 'x', '<html>gateway page</html>', null],
      );
      const messages = b.results.slice(1).map((x) => x.error?.message);
      assert.deepEqual(messages, [
        'the node answered 200 without a JSON object (the JSON value null)',
        'the node answered 200 without a JSON object (a JSON array)',
        'the node answered 200 without a JSON object (a JSON number)',
        'the node answered 200 without a JSON object (a JSON string)',
        'the node answered 200 without a JSON object (content-type "text/html")',
        'the node answered 200 without a JSON object (an empty body)',
      ]);
      for (const x of b.results.slice(1)) assert.equal(x.error?.type, 'server_error');
    } finally {
      await t.close();
      await node.close();
    }
  });
});
