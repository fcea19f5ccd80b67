/**
 * Integration tests of the Redis store against a real `redis-server` on loopback: exactness for
 * one instance, the bound across two instances sharing one Redis, agreement with the in-process
 * store decision by decision, reconciliation, script reload after the script cache is lost, key
 * expiry, and the degraded paths (Redis stopped, Redis hung) in both fail modes with recovery.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { createClient } from 'redis';
import { InProcessStore } from '../../proxy/ratelimit/in-process-store.js';
import { RateLimitDecision, RateLimitReason } from '../../proxy/ratelimit/rate-limit-decision.js';
import { RateLimiter, type RateLimitConfig } from '../../proxy/ratelimit/rate-limiter.js';
import { RedisStore, type RedisStoreOptions } from '../../proxy/ratelimit/redis-store.js';
import { TakeStatus } from '../../proxy/ratelimit/rate-limit-store.js';
import { BucketUnit } from '../../proxy/ratelimit/token-bucket.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { createLogger } from '../../proxy/runtime/logger.js';

const TIMEOUT_MS = 50;
/** Scheduling slack allowed on top of the per-call timeout. */
const SLACK_MS = 100;
/**
 * Timeout of the exactness tests. They test atomicity, which holds while Redis answers; a loaded
 * test machine must not turn them into tests of fail-open (those have their own tests below).
 */
const EXACT_TIMEOUT_MS = 2000;

let redis: TestRedis;
const stores: RedisStore[] = [];
let prefixCounter = 0;

/** A connected store with its own key prefix, closed after the file. */
async function store(options: Partial<RedisStoreOptions> = {}): Promise<RedisStore> {
  const s = new RedisStore({
    url: redis.url,
    keyPrefix: `test${++prefixCounter}:`,
    timeoutMs: TIMEOUT_MS,
    reconnectMaxDelayMs: 100,
    ...options,
  });
  stores.push(s);
  await s.ready();
  return s;
}

async function decide(d: RateLimitDecision | Promise<RateLimitDecision>): Promise<RateLimitDecision> {
  return d;
}

/**
 * Fires `n` checks without waiting for answers, alternating over `limiters`, in waves of `wave`
 * per event-loop turn (so several script calls of each instance are in flight and interleave at
 * Redis); returns the admitted count.
 */
async function burst(
  limiters: RateLimiter[],
  tenant: string,
  n: number,
  tokens = 0,
  wave = n,
): Promise<number> {
  const pending: Promise<RateLimitDecision>[] = [];
  for (let i = 0; i < n; i++) {
    const l = limiters[i % limiters.length]!;
    pending.push(decide(l.check(l.forTenant(tenant), null, tokens)));
    if ((i + 1) % wave === 0) await new Promise((r) => setImmediate(r));
  }
  const decisions = await Promise.all(pending);
  return decisions.filter((d) => d.allowed).length;
}

before(async () => {
  if (redisSkip() === false) redis = await startRedis();
});

after(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await redis?.stop();
});

describe('redis store', { timeout: 20_000, skip: redisSkip() }, () => {
  it('admits exactly N of a concurrent burst of 2N through one instance', async () => {
    const s = await store({ timeoutMs: EXACT_TIMEOUT_MS });
    const limiter = new RateLimiter({ store: s, tenants: { acme: { requestsPerMinute: 200 } } });
    assert.equal(await burst([limiter], 'acme', 400), 200, JSON.stringify(s.counters));
    assert.equal(limiter.counters.rejectedRequests, 200);
    assert.equal(s.counters.unavailable, 0);
  });

  it('admits at most N × 1.02 of a burst of 2N split across two instances sharing one Redis', async () => {
    const config: RateLimitConfig = {
      tenants: { acme: { requestsPerMinute: 500, tokensPerMinute: 500_000 } },
    };
    const a = await store({ keyPrefix: 'shared-burst:', timeoutMs: EXACT_TIMEOUT_MS });
    const b = await store({ keyPrefix: 'shared-burst:', timeoutMs: EXACT_TIMEOUT_MS });
    const la = new RateLimiter({ store: a, ...config });
    const lb = new RateLimiter({ store: b, ...config });
    const admitted = await burst([la, lb], 'acme', 1000, 100, 20);
    assert.ok(admitted <= 500 * 1.02, `${admitted} admitted`);
    assert.ok(admitted >= 500, `${admitted} admitted: the burst should use the whole allowance`);
    assert.ok(la.counters.admitted > 0 && lb.counters.admitted > 0, 'both instances admitted some');
    assert.equal(a.counters.unavailable + b.counters.unavailable, 0, 'no call failed open');
  });

  it('decides exactly like the in-process store, request by request, given the same clock (property)', async () => {
    let now = 1_700_000_000_000;
    const clock = (): number => now;
    const remote = await store({ time: 'client', clock });
    const local = new InProcessStore({ clock });
    const config: RateLimitConfig = {
      tenants: {
        t: { requestsPerMinute: 30, tokensPerMinute: 3000, models: { m: { tokensPerMinute: 1200 } } },
      },
    };
    const lr = new RateLimiter({ store: remote, ...config });
    const ll = new RateLimiter({ store: local, ...config });
    let seed = 11;
    const rnd = (): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    let admitted = 0;
    for (let i = 0; i < 300; i++) {
      now += rnd() < 0.5 ? 0 : rnd() * 4000;
      const model = rnd() < 0.5 ? 'm' : null;
      const tokens = Math.floor(rnd() * 400);
      const dr = await decide(lr.check(lr.forTenant('t'), model, tokens));
      const dl = await decide(ll.check(ll.forTenant('t'), model, tokens));
      assert.equal(dr.allowed, dl.allowed, `step ${i}`);
      assert.equal(dr.reason, dl.reason, `step ${i}`);
      assert.equal(dr.remainingRequests, dl.remainingRequests, `step ${i}`);
      assert.equal(dr.remainingTokens, dl.remainingTokens, `step ${i}`);
      if (dr.allowed && rnd() < 0.5) {
        const used = Math.floor(tokens * rnd() * 1.4);
        lr.reconcile(dr, used);
        ll.reconcile(dl, used);
        await remote.idle(); // applied at this clock reading, as the in-process store does
        admitted++;
      }
    }
    assert.ok(admitted > 10, 'the sequence admitted enough to be meaningful');
  });

  it('refunds and debits at reconciliation, below zero when usage exceeds the estimate', async () => {
    const s = await store();
    const limiter = new RateLimiter({ store: s, tenants: { acme: { tokensPerMinute: 1000 } } });
    const acme = limiter.forTenant('acme');
    const d = await decide(limiter.check(acme, null, 800));
    assert.equal(d.remainingTokens, 200);
    limiter.reconcile(d, 100);
    await s.idle();
    const e = await decide(limiter.check(acme, null, 100));
    assert.ok(e.remainingTokens >= 800 && e.remainingTokens <= 801, `remaining ${e.remainingTokens}`);
    limiter.reconcile(e, 2800);
    await s.idle();
    const f = await decide(limiter.check(acme, null, 1));
    assert.equal(f.allowed, false, 'the overdraft makes the next request wait');
    assert.ok(f.retryAfterMs > 55_000, `retry after ${f.retryAfterMs} ms`);
  });

  it('reloads its script when Redis has lost it (SCRIPT FLUSH, as after a restart)', async () => {
    const s = await store();
    const limiter = new RateLimiter({ store: s, tenants: { acme: { requestsPerMinute: 3 } } });
    assert.equal(await burst([limiter], 'acme', 1), 1);
    const raw = createClient({ url: redis.url });
    await raw.connect();
    try {
      assert.equal(await raw.sendCommand(['SCRIPT', 'FLUSH']), 'OK');
      assert.equal(await burst([limiter], 'acme', 5), 2, 'still counting after the reload');
      assert.equal(s.counters.unavailable, 0);
    } finally {
      raw.destroy();
    }
  });

  it('keeps each bucket under the tenant hash tag, expiring once it would be full again', async () => {
    const s = await store({ keyPrefix: 'ttl:' });
    const limiter = new RateLimiter({ store: s, tenants: { acme: { requestsPerMinute: 60 } } });
    await burst([limiter], 'acme', 30);
    const raw = createClient({ url: redis.url });
    await raw.connect();
    try {
      const ttl = Number(await raw.sendCommand(['PTTL', 'ttl:{acme}:req']));
      // 30 missing requests at 1/s refill in 30 s; +1 s margin.
      assert.ok(ttl > 29_000 && ttl <= 31_000, `ttl ${ttl}`);
      assert.deepEqual(await raw.sendCommand(['KEYS', 'ttl:*']), ['ttl:{acme}:req']);
    } finally {
      raw.destroy();
    }
  });

  it('takes nothing from any bucket when one bucket of the request refuses', async () => {
    const s = await store();
    const buckets = [
      s.bucket('{x}:req', BucketUnit.requests, 10, 10 / 60_000),
      s.bucket('{x}:tok', BucketUnit.tokens, 100, 100 / 60_000),
    ];
    const levels = [0, 0];
    assert.equal(await s.take(buckets, 150, levels), TakeStatus.rejected);
    assert.deepEqual(levels, [10, 100]);
    assert.equal(await s.take(buckets, 100, levels), TakeStatus.ok);
    assert.equal(levels[0], 9);
    assert.ok(levels[1]! >= 0 && levels[1]! < 0.1, `tokens left ${levels[1]}`);
  });
});

describe('redis store when redis fails', { timeout: 20_000, skip: redisSkip() }, () => {
  it('fails open or closed within the timeout while Redis is down, and limits again once it is back', async () => {
    const config: RateLimitConfig = { tenants: { acme: { requestsPerMinute: 20 } } };
    const lines: string[] = [];
    const open = await store({ failMode: 'open', logger: createLogger('debug', (l) => lines.push(l)) });
    const closed = await store({ failMode: 'closed' });
    const lo = new RateLimiter({ store: open, ...config });
    const lc = new RateLimiter({ store: closed, ...config });
    assert.equal(await burst([lo], 'acme', 40), 20, 'limiting before the outage');

    await redis.stop();
    for (let i = 0; i < 5; i++) {
      let t0 = performance.now();
      const d = await decide(lo.check(lo.forTenant('acme'), null, 0));
      const openMs = performance.now() - t0;
      assert.equal(d.allowed, true, 'fail-open admits');
      assert.equal(d.degraded, true);
      assert.ok(openMs < TIMEOUT_MS + SLACK_MS, `fail-open answered in ${openMs.toFixed(1)} ms`);
      t0 = performance.now();
      const e = await decide(lc.check(lc.forTenant('acme'), null, 0));
      const closedMs = performance.now() - t0;
      assert.equal(e.allowed, false, 'fail-closed rejects');
      assert.equal(e.reason, RateLimitReason.unavailable);
      assert.ok(closedMs < TIMEOUT_MS + SLACK_MS, `fail-closed answered in ${closedMs.toFixed(1)} ms`);
    }
    assert.ok(open.counters.unavailable >= 5 && closed.counters.unavailable >= 5);
    assert.equal(open.available, false);

    await redis.start();
    await open.ready();
    await closed.ready();
    // The restarted server is empty (no persistence) and has no script: buckets start full.
    assert.equal(await burst([lo], 'acme', 40), 20, 'fail-open store limits again');
    assert.equal(await burst([lc], 'acme', 40), 20, 'fail-closed store admits again');
    const log = lines.join('');
    assert.equal(
      log.match(/redis store unavailable .*failing open/g)?.length,
      1,
      'one line per outage, not per request',
    );
    assert.match(log, /redis store available again/);
  });

  it('answers within the timeout when Redis hangs (SIGSTOP), then recovers when it resumes', async () => {
    const config: RateLimitConfig = { tenants: { acme: { requestsPerMinute: 10 } } };
    const open = await store({ failMode: 'open' });
    const closed = await store({ failMode: 'closed' });
    const lo = new RateLimiter({ store: open, ...config });
    const lc = new RateLimiter({ store: closed, ...config });
    redis.pause();
    try {
      const t0 = performance.now();
      const [d, e] = await Promise.all([
        decide(lo.check(lo.forTenant('acme'), null, 0)),
        decide(lc.check(lc.forTenant('acme'), null, 0)),
      ]);
      const ms = performance.now() - t0;
      assert.equal(d.allowed, true);
      assert.equal(d.degraded, true);
      assert.equal(e.allowed, false);
      assert.equal(e.reason, RateLimitReason.unavailable);
      assert.ok(ms >= TIMEOUT_MS - 5, `gave up after ${ms.toFixed(1)} ms, before the timeout`);
      assert.ok(ms < TIMEOUT_MS + SLACK_MS, `answered in ${ms.toFixed(1)} ms`);
      assert.ok(open.counters.timeouts >= 1 && closed.counters.timeouts >= 1);
    } finally {
      redis.resume();
    }
    // Abandoned calls may still run once Redis resumes: they can only take, never give.
    const admitted = await burst([lc], 'acme', 20);
    assert.ok(admitted <= 10 && admitted >= 8, `${admitted} admitted after the hang`);
  });
});
