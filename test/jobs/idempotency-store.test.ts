import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  createIdempotencyStore,
  hashIdempotentRequest,
  scopeIdempotencyKey,
  type IdempotencyOptions,
  type StoredResponse,
} from '../../proxy/jobs/idempotency-store.js';
import { openJobDb } from '../../proxy/jobs/job-db.js';
import { ManualClock, tempDb } from './job-test-kit.js';

const RESPONSE: StoredResponse = {
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: '{"id":"batch_1"}',
};
const h1 = hashIdempotentRequest('POST', '/v1/batches', '{"a":1}');
const h2 = hashIdempotentRequest('POST', '/v1/batches', '{"a":2}');

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

    it('runs the first request and replays the stored response for the same key and body', () => {
      const keys = make(new ManualClock());
      assert.deepEqual(keys.begin('k', h1), { kind: 'new' });
      keys.complete('k', RESPONSE);
      assert.deepEqual(keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
      assert.deepEqual(keys.begin('k', h1), { kind: 'replay', response: RESPONSE });
    });

    it('reports a conflict for another body, before or after completion', () => {
      const keys = make(new ManualClock());
      keys.begin('k', h1);
      assert.deepEqual(keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
      keys.complete('k', RESPONSE);
      assert.deepEqual(keys.begin('k', h2), { kind: 'conflict', reason: 'different-body' });
    });

    it('reports a conflict while the first request still runs', () => {
      const keys = make(new ManualClock());
      keys.begin('k', h1);
      assert.deepEqual(keys.begin('k', h1), { kind: 'conflict', reason: 'in-progress' });
    });

    it('forgets a completed key after its TTL', () => {
      const clock = new ManualClock();
      const keys = make(clock, { ttlMs: 60_000 });
      keys.begin('k', h1);
      keys.complete('k', RESPONSE);
      clock.advance(59_999);
      assert.equal(keys.begin('k', h1).kind, 'replay');
      clock.advance(1);
      assert.deepEqual(keys.begin('k', h2), { kind: 'new' }, 'an expired key is free, whatever the body');
      assert.equal(keys.purgeExpired(), 0, 'the key was taken again, nothing to purge');
      clock.advance(600_000);
      assert.equal(keys.purgeExpired(), 1);
    });

    it('frees a claim that was abandoned or never completed', () => {
      const clock = new ManualClock();
      const keys = make(clock, { inProgressTtlMs: 10_000 });
      keys.begin('a', h1);
      keys.abandon('a');
      assert.deepEqual(keys.begin('a', h1), { kind: 'new' });
      keys.begin('b', h1);
      clock.advance(10_000);
      assert.deepEqual(keys.begin('b', h1), { kind: 'new' }, 'the process holding it is presumed dead');
    });

    it('keeps keys of different tenants and endpoints apart', () => {
      const keys = make(new ManualClock());
      const a = scopeIdempotencyKey('tenant-a', 'POST', '/v1/batches', 'k');
      const b = scopeIdempotencyKey('tenant-b', 'POST', '/v1/batches', 'k');
      keys.begin(a, h1);
      keys.complete(a, RESPONSE);
      assert.deepEqual(keys.begin(b, h2), { kind: 'new' });
    });
  });
}

describe('idempotency store (sqlite, two connections)', () => {
  it('gives `new` to exactly one of two processes sharing the file', () => {
    const env = tempDb();
    const other = openJobDb(env.path);
    try {
      const clock = new ManualClock();
      const one = createIdempotencyStore({ db: env.db, clock: clock.now });
      const two = createIdempotencyStore({ db: other, clock: clock.now });
      assert.deepEqual(one.begin('k', h1), { kind: 'new' });
      assert.deepEqual(two.begin('k', h1), { kind: 'conflict', reason: 'in-progress' });
      one.complete('k', RESPONSE);
      assert.deepEqual(two.begin('k', h1), { kind: 'replay', response: RESPONSE });
    } finally {
      other.close();
      env.cleanup();
    }
  });
});
