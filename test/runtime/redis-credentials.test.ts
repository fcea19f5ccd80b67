/**
 * A Redis that refuses the credentials in a store's URL is a configuration error, not an outage:
 * Sluice refuses to start and names Redis's answer, for the rate-limit store and the batch job
 * store alike, and a rate-limit store that meets the refusal later logs it at error level. Real
 * redis-server with a password.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createClient } from 'redis';
import { RedisStore } from '../../proxy/ratelimit/redis-store.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import { refusedPort } from '../helpers/refused-port.js';
import { basicConfig, memoryLogger, startRefused, startTestSluice, waitFor } from '../helpers/sluice.js';

const PASSWORD = 'secretpw';
const DIGEST = createHash('sha256').update('sk-redis-credentials-0123456789').digest('hex');

describe('redis stores with wrong credentials', { timeout: 30_000, skip: redisSkip() }, () => {
  let redis: TestRedis;
  let node = '';
  /** `redis://` + `auth` + `127.0.0.1:PORT`. */
  let url: (auth: string) => string;

  before(async () => {
    redis = await startRedis();
    const raw = createClient({ url: redis.url });
    await raw.connect();
    try {
      await raw.sendCommand(['CONFIG', 'SET', 'requirepass', PASSWORD]);
    } finally {
      raw.destroy();
    }
    url = (auth) => `redis://${auth}127.0.0.1:${redis.port}`;
    node = `http://127.0.0.1:${await refusedPort()}`;
  });
  after(async () => {
    await redis?.stop();
  });

  function rateLimits(redisUrl: string): string {
    return basicConfig(
      [node],
      `tenants:\n  - name: a\n    keys: [{ sha256: ${DIGEST} }]\n    limits: { requests_per_minute: 60 }\n` +
        `rate_limits:\n  store: redis\n  redis: { url: "${redisUrl}", fail_mode: open }\n`,
    );
  }

  function jobs(redisUrl: string): string {
    return basicConfig([node], `batch_api:\n  jobs:\n    store: redis\n    redis: { url: "${redisUrl}" }\n`);
  }

  it('refuses to start with a wrong or missing rate-limit password, naming the refusal', async () => {
    const wrong = await startRefused(rateLimits(url(':wrongpw@')));
    assert.match(
      wrong.message,
      new RegExp(
        `rate_limits\\.redis: redis at 127\\.0\\.0\\.1:${redis.port} refused the credentials \\(WRONGPASS`,
      ),
    );
    assert.doesNotMatch(wrong.message, /wrongpw/, 'the password stays out of the message');
    const missing = await startRefused(rateLimits(url('')));
    assert.match(missing.message, /rate_limits\.redis: .* refused the credentials \(NOAUTH/);
  });

  it('refuses to start with a wrong or missing job store password, naming the refusal', async () => {
    const wrong = await startRefused(jobs(url(':wrongpw@')));
    assert.match(
      wrong.message,
      new RegExp(
        `redis job backend: redis at 127\\.0\\.0\\.1:${redis.port} refused the credentials \\(WRONGPASS`,
      ),
    );
    const missing = await startRefused(jobs(url('')));
    assert.match(missing.message, /redis job backend: .* refused the credentials \(NOAUTH/);
  });

  it('starts with the right password, for both stores', async () => {
    const right = url(`:${PASSWORD}@`);
    const limited = await startTestSluice(rateLimits(right));
    await limited.close();
    const batch = await startTestSluice(jobs(right));
    await batch.close();
  });

  it('names a Redis that is down in the job store timeout, not only the timeout', async () => {
    const down = `redis://127.0.0.1:${await refusedPort()}`;
    const err = await startRefused(jobs(down));
    assert.match(err.message, /no connection to .* within 5000 ms \(last error: .*ECONNREFUSED/);
  });

  it('logs a refusal met after startup at error level, once', async () => {
    const lines: string[] = [];
    const store = new RedisStore({ url: url(':wrongpw@'), logger: memoryLogger(lines) });
    try {
      await waitFor(async () => lines.length > 0, 5000, 'the refusal to be logged');
      // The client keeps retrying meanwhile; the line is written once per transition.
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(lines.length, 1, lines.join(''));
      assert.match(
        lines[0]!,
        /error.*ratelimit: redis at .* refused the credentials \(WRONGPASS.*failing open/,
      );
    } finally {
      await store.close();
    }
  });
});
