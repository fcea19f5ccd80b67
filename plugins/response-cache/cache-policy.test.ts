/**
 * The answer stores of response-cache: both stay within their byte budget and expire entries after
 * their TTL; LRU drops the least recently used entry; the cost-aware policy keeps an expensive or
 * popular answer that LRU would drop, and still ages out entries nobody uses.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CostAwareStore, LruStore, type AnswerStore } from './cache-policy.js';

const entry = (costMs: number, bytes = 100, expiresAt = Infinity) => ({
  body: 'x'.repeat(bytes),
  costMs,
  expiresAt,
});

describe('response-cache stores', { timeout: 10_000 }, () => {
  for (const make of [(n: number) => new LruStore(n), (n: number) => new CostAwareStore(n)]) {
    const name = make(1).policy;
    it(`${name}: stays within its byte budget and refuses an entry larger than all of it`, () => {
      const s: AnswerStore = make(2000);
      for (let i = 0; i < 50; i++) assert.ok(s.set(`k${i}`, entry(10)));
      assert.ok(s.bytes <= 2000);
      assert.ok(s.evictions > 0);
      assert.equal(s.set('huge', entry(10, 5000)), false);
    });
    it(`${name}: forgets an entry after its TTL`, () => {
      const s = make(10_000);
      s.set('a', entry(10, 100, 1000));
      assert.ok(s.get('a', 999) !== undefined);
      assert.equal(s.get('a', 1000), undefined);
      assert.equal(s.size, 0);
    });
  }

  it('lru drops the least recently used entry', () => {
    const s = new LruStore(3 * 200);
    s.set('a', entry(1));
    s.set('b', entry(1));
    s.set('c', entry(1));
    s.get('a', 0);
    s.set('d', entry(1));
    assert.equal(s.get('b', 0), undefined);
    assert.ok(s.get('a', 0) !== undefined);
  });

  it('cost-aware keeps the expensive answer that lru drops', () => {
    const trace = (s: AnswerStore): boolean => {
      s.set('expensive', entry(5000));
      for (let i = 0; i < 10; i++) s.set(`cheap${i}`, entry(5));
      return s.get('expensive', 0) !== undefined;
    };
    assert.equal(trace(new LruStore(4 * 200)), false);
    assert.equal(trace(new CostAwareStore(4 * 200)), true);
  });

  it('cost-aware ages out an expensive entry nobody asks for again', () => {
    const s = new CostAwareStore(4 * 200);
    s.set('old', entry(50));
    for (let i = 0; i < 200; i++) {
      s.set(`k${i}`, entry(40));
      s.get(`k${i}`, 0);
    }
    assert.equal(s.get('old', 0), undefined);
  });
});
