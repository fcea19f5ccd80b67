import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from 'redis';
import {
  createIdempotencyStore,
  createRedisIdempotencyStore,
  hashIdempotentRequest,
  scopeIdempotencyKey,
  type IdempotencyOptions,
  type StoredResponse,
} from '../../proxy/jobs/idempotency-store.js';
import { openJobDb } from '../../proxy/jobs/job-db.js';
import { redisSkip, settlesWithin, startRedis, type TestRedis } from '../helpers/redis.js';
import { ManualClock, tempDb } from './job-test-kit.js';

const RESPONSE: StoredResponse = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: '{"id":"batch_1"}',
};
const h1 = hashIdempotentRequest('POST', '/v1/batches', '{"a":1}');
const h2 = hashIdempotentRequest('POST', '/v1/batches', '{"a":2}');

/** Polls `check` until it holds or `ms` pass. */
async function until(what: string, ms: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const kinds: [
  string,
  (clock: ManualClock, extra?: IdempotencyOptions) => ReturnType<typeof createIdempotencyStore>,
][] = [];
const cleanups: (() => void)[] = [];
kinds.push(['in-memory', (clock, extra) => createIdempotencyStore({ clock: clock.now, ...extra })]);
kinds.push([
  'sqlite',
  (clock, extra) => {
    const env = tempDb();
    cleanups.push(env.cleanup);
    return createIdempotencyStore({ db: env.db, clock: clock.now, ...extra });
  },
]);

for (const [name, make] of kinds) {
  describe(`idempotency store (${name})`, () => {
    afterEach(() => {
      for (const c of cleanups.splice(0)) c();
    });

    it('runs the first request and replays the stored response for the same key and body', async () => {
      const keys = make(new ManualClock());
      assert.deepEqual(await keys.begin('k', h1), { kind: 'new' });
      await keys.complete('k', RESPONSE);
      assert.deepEqual(await keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
      assert.deepEqual(await keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
    });

    it('reports a conflict for another body, before or after completion', async () => {
      const keys = make(new ManualClock());
      await keys.begin('k', h1);
      assert.deepEqual(await keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
      await keys.complete('k', RESPONSE);
      assert.deepEqual(await keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
    });

    it('reports a conflict while the first request still runs', async () => {
      const keys = make(new ManualClock());
      await keys.begin('k', h1);
      assert.deepEqual(await keys.begin('k', h1), { kind: 'conflict', reason: 'in-progress' });
    });

    it('forgets a completed key after its TTL', async () => {
      const clock = new ManualClock();
      const keys = make(clock, { ttlMs: 60_000 });
      await keys.begin('k', h1);
      await keys.complete('k', RESPONSE);
      clock.advance(59_999);
      assert.equal((await keys.begin('k', h1)).kind, 'replay');
      clock.advance(1);
      assert.deepEqual(
        await keys.begin('k', h2),
        { kind: 'new' },
        'an expired key is free, whatever the body',
      );
      assert.equal(await keys.purgeExpired(), 0, 'the key was taken again, nothing to purge');
      clock.advance(600_000);
      assert.equal(await keys.purgeExpired(), 1);
    });

    it('frees a claim that was abandoned or never completed', async () => {
      const clock = new ManualClock();
      const keys = make(clock, { inProgressTtlMs: 10_000 });
      await keys.begin('a', h1);
      await keys.abandon('a');
      assert.deepEqual(await keys.begin('a', h1), { kind: 'new' });
      await keys.begin('b', h1);
      clock.advance(10_000);
      assert.deepEqual(await keys.begin('b', h1), { kind: 'new' }, 'the process holding it is presumed dead');
    });

    it('keeps keys of different tenants and endpoints apart', async () => {
      const keys = make(new ManualClock());
      const a = scopeIdempotencyKey('tenant-a', 'POST', '/v1/batches', 'k');
      const b = scopeIdempotencyKey('tenant-b', 'POST', '/v1/batches', 'k');
      await keys.begin(a, h1);
      await keys.complete(a, RESPONSE);
      assert.deepEqual(await keys.begin(b, h2), { kind: 'new' });
    });
  });
}

describe('idempotency store (sqlite, two connections)', () => {
  it('gives `new` to exactly one of two processes sharing the file', async () => {
    const env = tempDb();
    const other = openJobDb(env.path);
    try {
      const clock = new ManualClock();
      const one = createIdempotencyStore({ db: env.db, clock: clock.now });
      const two = createIdempotencyStore({ db: other, clock: clock.now });
      assert.deepEqual(await one.begin('k', h1), { kind: 'new' });
      assert.deepEqual(await two.begin('k', h1), { kind: 'conflict', reason: 'in-progress' });
      await one.complete('k', RESPONSE);
      assert.deepEqual(await two.begin('k', h1), { kind: 'replay', response: RESPONSE });
    } finally {
      other.close();
      env.cleanup();
    }
  });
});

describe('idempotency store (redis)', { skip: redisSkip() }, () => {
  let redis: TestRedis;
  let prefixes = 0;
  const open: { close(): Promise<void> }[] = [];
  before(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    for (const s of open.splice(0)) await s.close();
  });
  after(() => redis?.stop());

  /** A store with its own connection and a fresh key prefix. */
  async function make(opts: { ttlMs?: number; inProgressTtlMs?: number; prefix?: string } = {}) {
    const store = await createRedisIdempotencyStore({
      url: redis.url,
      prefix: opts.prefix ?? `idem-${++prefixes}:`,
      ...opts,
    });
    open.push(store);
    return store;
  }

  it('replays the stored response for the same key and body, to another instance too', async () => {
    const one = await make({ prefix: 'shared:' });
    const two = await make({ prefix: 'shared:' });
    assert.deepEqual(await one.begin('k', h1), { kind: 'new' });
    await one.complete('k', RESPONSE);
    assert.deepEqual(await one.begin('k', h1), { kind: 'replay', response: RESPONSE });
    assert.deepEqual(await two.begin('k', h1), { kind: 'replay', response: RESPONSE });
  });

  it('reports a conflict for another body, before or after completion', async () => {
    const keys = await make();
    await keys.begin('k', h1);
    assert.deepEqual(await keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
    await keys.complete('k', RESPONSE);
    assert.deepEqual(await keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
  });

  it('gives `new` to exactly one of many instances racing on one key', async () => {
    const stores = await Promise.all([1, 2, 3, 4].map(() => make({ prefix: 'race:' })));
    const answers = await Promise.all(stores.flatMap((s) => [s.begin('k', h1), s.begin('k', h1)]));
    assert.equal(answers.filter((a) => a.kind === 'new').length, 1);
    assert.equal(answers.filter((a) => a.kind === 'conflict' && a.reason === 'in-progress').length, 7);
  });

  it('frees a claim that was abandoned, and one never completed once its TTL passes', async () => {
    const keys = await make({ inProgressTtlMs: 150 });
    await keys.begin('a', h1);
    await keys.abandon('a');
    assert.deepEqual(await keys.begin('a', h1), { kind: 'new' });
    await keys.begin('b', h1);
    assert.deepEqual(await keys.begin('b', h1), { kind: 'conflict', reason: 'in-progress' });
    await until('the claim to expire', 5000, async () => (await keys.begin('b', h2)).kind === 'new');
  });

  it('abandon leaves a completed key alone', async () => {
    const keys = await make();
    await keys.begin('k', h1);
    await keys.complete('k', RESPONSE);
    await keys.abandon('k');
    assert.deepEqual(await keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
  });

  it('forgets a completed key when its Redis TTL runs out', async () => {
    const keys = await make({ ttlMs: 200, inProgressTtlMs: 60_000 });
    await keys.begin('k', h1);
    await keys.complete('k', RESPONSE);
    assert.equal((await keys.begin('k', h1)).kind, 'replay');
    await until('the key to expire', 5000, async () => (await keys.begin('k', h2)).kind === 'new');
  });

  it('keeps its keys under the prefix, hashed, with a TTL on each', async () => {
    const keys = await make({ prefix: 'ttl-check:', ttlMs: 60_000 });
    await keys.begin(scopeIdempotencyKey('acme', 'POST', '/v1/batches', 'k'), h1);
    const raw = createClient({ url: redis.url });
    await raw.connect();
    try {
      const found = await raw.sendCommand<string[]>(['KEYS', 'ttl-check:*']);
      assert.equal(found.length, 1);
      assert.match(found[0]!, /^ttl-check:[0-9a-f]{64}$/);
      const ttl = Number(await raw.sendCommand(['PTTL', found[0]!]));
      assert.ok(ttl > 0 && ttl <= 600_000, `in-progress ttl ${ttl}`);
      await keys.complete(scopeIdempotencyKey('acme', 'POST', '/v1/batches', 'k'), RESPONSE);
      const done = Number(await raw.sendCommand(['PTTL', found[0]!]));
      assert.ok(done > 0 && done <= 60_000, `completed ttl ${done}`);
    } finally {
      raw.destroy();
    }
  });

  it('works over a shared client, reloading its scripts after SCRIPT FLUSH, and leaves that client open', async () => {
    const client = createClient({ url: redis.url });
    await client.connect();
    try {
      const keys = await createRedisIdempotencyStore({ client, prefix: 'shared-client:' });
      assert.deepEqual(await keys.begin('k', h1), { kind: 'new' });
      await client.sendCommand(['SCRIPT', 'FLUSH']);
      await keys.complete('k', RESPONSE);
      assert.deepEqual(await keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
      await keys.close();
      assert.equal(await client.sendCommand(['PING']), 'PONG');
    } finally {
      client.destroy();
    }
  });

  it('rejects a call Redis does not answer in time, and frees the key its late claim took', async () => {
    const keys = await createRedisIdempotencyStore({
      url: redis.url,
      prefix: 'frozen:',
      commandTimeoutMs: 300,
    });
    open.push(keys);
    redis.pause();
    try {
      await assert.rejects(
        settlesWithin(keys.begin('k', h1), 3000, 'begin'),
        /redis did not answer within 300 ms/,
      );
    } finally {
      redis.resume();
    }
    // The begin ran once Redis thawed; its caller answered 503, so the client's retry must run.
    await until(
      'the late claim to be released',
      3000,
      async () => (await keys.begin('k', h1)).kind === 'new',
    );
  });

  it('rejects calls while Redis is down instead of answering', async () => {
    const keys = await make();
    await redis.stop();
    try {
      await assert.rejects(keys.begin('k', h1));
    } finally {
      await redis.start();
    }
  });
});
