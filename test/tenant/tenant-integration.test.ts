/**
 * Tenants, limits and admission through a real Sluice in front of simulated nodes: API keys (401),
 * request and token limits (429 with OpenAI headers), token reconciliation from usage, admission
 * queueing with fast 503s and deadlines, and two Sluice instances sharing one real Redis.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const KEY_A = 'sk-tenant-a-0123456789';
const KEY_B = 'sk-tenant-b-9876543210';
const sha = (k: string): string => createHash('sha256').update(k).digest('hex');

function chat(
  key: string | null,
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): RequestInit {
  return {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === null ? {} : { authorization: `Bearer ${key}` }),
      ...headers,
    },
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hello there' }],
      max_tokens: 4,
      ...body,
    }),
  };
}

function config(nodes: readonly string[], tenants: string, extra = '', pool = '', route = ''): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
${pool}
routes:
  - name: chat
    match: { path: /v1/chat/completions }
    pool: gpu
${route}
tenants:
${tenants}
${extra}
`;
}

const TWO_TENANTS = `  - name: a
    keys: [{ sha256: ${sha(KEY_A)} }]
  - name: b
    keys: [{ env: SLUICE_TEST_KEY_B }]`;

describe('tenants, limits and admission', () => {
  let fleet: SimFleet;
  let t: TestSluice | null = null;

  before(async () => {
    process.env['SLUICE_TEST_KEY_B'] = KEY_B;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });

  afterEach(async () => {
    await t?.close();
    t = null;
  });

  after(async () => {
    await fleet?.close();
  });

  it('answers 401 invalid_api_key without a key or with an unknown one, and serves known keys', async () => {
    t = await startTestSluice(config(fleet.urls, TWO_TENANTS));
    for (const key of [null, 'sk-wrong', KEY_A + 'x']) {
      const r = await fetch(`${t.url}/v1/chat/completions`, chat(key));
      assert.equal(r.status, 401);
      const body = (await r.json()) as { error: { code: string; type: string } };
      assert.equal(body.error.code, 'invalid_api_key');
    }
    for (const key of [KEY_A, KEY_B]) {
      const r = await fetch(`${t.url}/v1/chat/completions`, chat(key));
      assert.equal(r.status, 200);
      await r.arrayBuffer();
    }
    assert.ok(!t.logs.some((l) => l.includes(KEY_A) || l.includes(KEY_B)), 'keys never appear in logs');
  });

  it('serves keyless requests as the anonymous tenant only on routes that allow it', async () => {
    t = await startTestSluice(
      config(
        fleet.urls,
        `${TWO_TENANTS}\n  - name: public\n    keys: []`,
        'anonymous_tenant: public',
        '',
        '    allow_anonymous: true',
      ),
    );
    const r = await fetch(`${t.url}/v1/chat/completions`, chat(null));
    assert.equal(r.status, 200);
    await r.arrayBuffer();
    const wrong = await fetch(`${t.url}/v1/chat/completions`, chat('sk-wrong'));
    assert.equal(wrong.status, 401, 'a wrong key never falls back to anonymous');
    await wrong.arrayBuffer();
  });

  it('admits exactly N of a burst of 2N under requests_per_minute, with OpenAI rate-limit headers', async () => {
    t = await startTestSluice(
      config(
        fleet.urls,
        `  - name: a\n    keys: [{ sha256: ${sha(KEY_A)} }]\n    limits: { requests_per_minute: 10 }`,
      ),
    );
    const results = await Promise.all(
      Array.from({ length: 20 }, () => fetch(`${t!.url}/v1/chat/completions`, chat(KEY_A))),
    );
    const statuses = results.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 200).length, 10);
    assert.equal(statuses.filter((s) => s === 429).length, 10);
    const ok = results.find((r) => r.status === 200)!;
    assert.equal(ok.headers.get('x-ratelimit-limit-requests'), '10');
    assert.match(ok.headers.get('x-ratelimit-remaining-requests') ?? '', /^\d+$/);
    assert.match(ok.headers.get('x-ratelimit-reset-requests') ?? '', /^\d/);
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_ratelimit_total\{outcome="rejected_requests"\} 10/);
    const limited = results.find((r) => r.status === 429)!;
    assert.match(limited.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
    assert.match(limited.headers.get('retry-after-ms') ?? '', /^[1-9]\d*$/);
    const body = (await limited.json()) as { error: { type: string; code: string; message: string } };
    assert.equal(body.error.code, 'rate_limit_exceeded');
    assert.equal(body.error.type, 'requests');
    for (const r of results) if (!r.bodyUsed) await r.arrayBuffer();
  });

  it('refuses a request larger than the token budget for good, with x-should-retry: false', async () => {
    t = await startTestSluice(
      config(
        fleet.urls,
        `  - name: a\n    keys: [{ sha256: ${sha(KEY_A)} }]\n    limits: { tokens_per_minute: 500 }`,
      ),
    );
    const r = await fetch(`${t.url}/v1/chat/completions`, chat(KEY_A, { max_tokens: 4000 }));
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('x-should-retry'), 'false');
    assert.equal(((await r.json()) as { error: { type: string } }).error.type, 'tokens');
  });

  it('refunds an over-estimated token charge from the usage the node reports', async () => {
    // No max_tokens: the charge assumes 1024 output tokens; the node generates 8 and says so.
    t = await startTestSluice(
      config(
        fleet.urls,
        `  - name: a\n    keys: [{ sha256: ${sha(KEY_A)} }]\n    limits: { tokens_per_minute: 3000 }`,
      ),
    );
    const noMax = { max_tokens: undefined };
    const first = await fetch(`${t.url}/v1/chat/completions`, chat(KEY_A, noMax));
    assert.equal(first.status, 200);
    const remainingFirst = Number(first.headers.get('x-ratelimit-remaining-tokens'));
    await first.arrayBuffer();
    assert.ok(remainingFirst < 2000, `first charge includes the 1024-token budget (${remainingFirst} left)`);
    const stream = await fetch(
      `${t.url}/v1/chat/completions`,
      chat(KEY_A, { ...noMax, stream: true, stream_options: { include_usage: true } }),
    );
    assert.equal(stream.status, 200);
    await stream.text();
    const third = await fetch(`${t.url}/v1/chat/completions`, chat(KEY_A, noMax));
    assert.equal(third.status, 200, 'without reconciliation the third request would exceed 3000 tokens');
    const remainingThird = Number(third.headers.get('x-ratelimit-remaining-tokens'));
    await third.arrayBuffer();
    assert.ok(
      remainingThird > remainingFirst - 200,
      `the first two charges were refunded (${remainingThird} left)`,
    );
  });

  it('queues over capacity, answers 503 server_is_overloaded at once when the queue is full, and serves the queued request', async () => {
    t = await startTestSluice(
      config(
        fleet.urls,
        TWO_TENANTS,
        '',
        '    admission: { max_in_flight_per_node: 1, max_queue: 1, max_wait_ms: 5000 }',
      ),
    );
    const slow = await fetch(
      `${t.url}/v1/chat/completions`,
      chat(KEY_A, { stream: true, max_tokens: 6 }, { 'x-sim-chunk-delay-ms': '50' }),
    );
    assert.equal(slow.status, 200);
    const queued = fetch(`${t.url}/v1/chat/completions`, chat(KEY_B));
    // Wait until the second request sits in the queue.
    const ctl = t.sluice.runtime.pools.get('gpu')!.admission!;
    const deadline = Date.now() + 2000;
    while (ctl.queued < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(ctl.queued, 1);
    const started = performance.now();
    const rejected = await fetch(`${t.url}/v1/chat/completions`, chat(KEY_A));
    const ms = performance.now() - started;
    assert.equal(rejected.status, 503);
    assert.ok(ms < 50, `rejection took ${ms.toFixed(1)} ms`);
    assert.match(rejected.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
    assert.equal(((await rejected.json()) as { error: { code: string } }).error.code, 'server_is_overloaded');
    await slow.text();
    const q = await queued;
    assert.equal(q.status, 200, 'the queued request was served once the slot freed');
    await q.arrayBuffer();
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_admission_total\{pool="gpu",outcome="admitted_from_queue"\} 1/);
    assert.match(metrics, /sluice_admission_total\{pool="gpu",outcome="rejected_queue_full"\} 1/);
  });

  it('keeps queued requests waiting, and then served, across a reload that changes the queue settings', async () => {
    const yaml = (queue: number): string =>
      config(
        fleet.urls,
        TWO_TENANTS,
        '',
        `    admission: { max_in_flight_per_node: 1, max_queue: ${queue} }`,
      );
    t = await startTestSluice(yaml(4));
    const slow = await fetch(
      `${t.url}/v1/chat/completions`,
      chat(KEY_A, { stream: true, max_tokens: 6 }, { 'x-sim-chunk-delay-ms': '40' }),
    );
    const queued = fetch(`${t.url}/v1/chat/completions`, chat(KEY_B));
    const ctl = t.sluice.runtime.pools.get('gpu')!.admission!;
    const deadline = Date.now() + 2000;
    while (ctl.queued < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(ctl.queued, 1);
    await writeFile(t.configPath, yaml(8));
    assert.equal((await t.sluice.reload()).result, 'applied');
    assert.equal(t.sluice.runtime.pools.get('gpu')!.admission, ctl, 'the same controller, reconfigured');
    await slow.text();
    const q = await queued;
    assert.equal(q.status, 200);
    await q.arrayBuffer();
  });

  it('drops a queued request whose deadline passes with 503 deadline_exceeded instead of serving it late', async () => {
    t = await startTestSluice(
      config(fleet.urls, TWO_TENANTS, '', '    admission: { max_in_flight_per_node: 1, max_queue: 10 }'),
    );
    const slow = await fetch(
      `${t.url}/v1/chat/completions`,
      chat(KEY_A, { stream: true, max_tokens: 8 }, { 'x-sim-chunk-delay-ms': '50' }),
    );
    const started = performance.now();
    const late = await fetch(
      `${t.url}/v1/chat/completions`,
      chat(KEY_B, {}, { 'x-request-deadline-ms': '100' }),
    );
    const ms = performance.now() - started;
    assert.equal(late.status, 503);
    assert.equal(((await late.json()) as { error: { code: string } }).error.code, 'deadline_exceeded');
    assert.ok(ms >= 90 && ms < 300, `dropped after ${ms.toFixed(0)} ms`);
    await slow.text();
  });
});

describe('two Sluice instances sharing Redis', { skip: redisSkip() }, () => {
  let fleet: SimFleet;
  let redis: TestRedis;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    redis = await startRedis();
  });

  after(async () => {
    await fleet?.close();
    await redis?.stop();
  });

  it('admit at most N x 1.02 of a 2N burst split across both instances', async () => {
    const yaml = config(
      fleet.urls,
      `  - name: a\n    keys: [{ sha256: ${sha(KEY_A)} }]\n    limits: { requests_per_minute: 50 }`,
      `rate_limits:\n  store: redis\n  redis: { url: "${redis.url}", timeout_ms: 200, fail_mode: closed }`,
    );
    const one = await startTestSluice(yaml);
    const two = await startTestSluice(yaml);
    try {
      const send = (s: TestSluice): Promise<number> =>
        fetch(`${s.url}/v1/chat/completions`, chat(KEY_A)).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        });
      const statuses = await Promise.all(
        Array.from({ length: 100 }, (_, i) => send(i % 2 === 0 ? one : two)),
      );
      const admitted = statuses.filter((s) => s === 200).length;
      assert.ok(admitted >= 50 && admitted <= 51, `${admitted} admitted of 100 with a limit of 50/min`);
      assert.equal(admitted + statuses.filter((s) => s === 429).length, 100);
    } finally {
      await one.close();
      await two.close();
    }
  });
});
