/**
 * Rate limits on a Redis that stops answering, through real Sluice instances and a real
 * redis-server: `fail_mode: closed` answers 503 within the timeout, `fail_mode: open` serves
 * without limits, and both limit again once Redis answers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-redis-outage-0123456789';
const AUTH = { authorization: `Bearer ${KEY}` };
const TIMEOUT_MS = 150;

describe('rate limits while Redis hangs', { timeout: 30_000, skip: redisSkip() }, () => {
  let fleet: SimFleet;
  let redis: TestRedis;
  let closed: TestSluice;
  let open: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    redis = await startRedis();
    const digest = createHash('sha256').update(KEY).digest('hex');
    const yaml = (mode: string): string =>
      basicConfig(
        fleet.urls,
        `tenants:\n  - name: a\n    keys: [{ sha256: ${digest} }]\n    limits: { requests_per_minute: 1000 }\n` +
          `rate_limits:\n  store: redis\n  redis: { url: "${redis.url}", timeout_ms: ${TIMEOUT_MS}, fail_mode: ${mode} }\n`,
      );
    closed = await startTestSluice(yaml('closed'));
    open = await startTestSluice(yaml('open'));
  });

  after(async () => {
    redis?.resume();
    await closed?.close();
    await open?.close();
    await redis?.stop();
    await fleet?.close();
  });

  async function send(
    t: TestSluice,
  ): Promise<{ status: number; ms: number; code: string; limit: string | null }> {
    const started = performance.now();
    const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}, AUTH));
    const text = await r.text();
    const code = r.status === 200 ? '' : ((JSON.parse(text) as { error: { code: string } }).error.code ?? '');
    return {
      status: r.status,
      ms: performance.now() - started,
      code,
      limit: r.headers.get('x-ratelimit-limit-requests'),
    };
  }

  it('fails closed or open within the timeout, and limits again once Redis answers', async () => {
    assert.deepEqual(
      [(await send(closed)).limit, (await send(open)).limit],
      ['1000', '1000'],
      'both limit while Redis answers',
    );

    redis.pause();
    const refused = await send(closed);
    assert.equal(refused.status, 503);
    assert.equal(refused.code, 'rate_limiter_unavailable');
    assert.ok(refused.ms < TIMEOUT_MS + 500, `fail-closed answer took ${refused.ms.toFixed(0)} ms`);
    const served = await send(open);
    assert.equal(served.status, 200);
    assert.equal(served.limit, null, 'no rate-limit headers while the limits are not known');
    assert.ok(served.ms < TIMEOUT_MS + 500, `fail-open answer took ${served.ms.toFixed(0)} ms`);

    redis.resume();
    await waitFor(async () => (await send(closed)).status === 200, 5000, 'fail-closed Sluice to recover');
    assert.equal((await send(closed)).limit, '1000');
    assert.equal((await send(open)).limit, '1000');
  });
});
