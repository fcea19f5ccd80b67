/**
 * The prefix cache alone: chained block keys, whole-block matching, LRU eviction that takes a
 * chain's tail before its head, and resizing.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PrefixCache, blockKeys } from '../../../loadtest/sim/prefix-cache.js';

describe('blockKeys', () => {
  it('keys only whole blocks, each by everything before it', () => {
    assert.equal(blockKeys('a'.repeat(63), 16).length, 0);
    const k1 = blockKeys('a'.repeat(64) + 'b'.repeat(64), 16);
    const k2 = blockKeys('c'.repeat(64) + 'b'.repeat(64), 16);
    assert.equal(k1.length, 2);
    assert.notEqual(k1[1], k2[1], 'the same block after a different prefix must get a different key');
    assert.deepEqual(blockKeys('a'.repeat(64) + 'b'.repeat(70), 16), k1);
  });
});

describe('PrefixCache', () => {
  it('matches the leading run of cached blocks only', () => {
    const cache = new PrefixCache(16, 1000);
    const keys = blockKeys('x'.repeat(64 * 4), 16);
    cache.insert(keys, 2);
    assert.equal(cache.match(keys, 4), 2);
    assert.equal(cache.match(keys, 1), 1);
    assert.equal(cache.tokens, 32);
  });

  it('evicts least recently used blocks, a chain’s tail before its head', () => {
    const cache = new PrefixCache(16, 16 * 4);
    const a = blockKeys('a'.repeat(64 * 3), 16);
    const b = blockKeys('b'.repeat(64 * 2), 16);
    cache.insert(a, 3);
    cache.insert(b, 2);
    assert.equal(cache.tokens, 64);
    assert.equal(cache.match(a, 3), 2, 'the tail block of chain a is evicted first');
    assert.equal(cache.match(b, 2), 2);
  });

  it('shrinks to a new capacity and empties on clear', () => {
    const cache = new PrefixCache(16, 16 * 10);
    cache.insert(blockKeys('q'.repeat(64 * 8), 16), 8);
    cache.resize(16 * 3);
    assert.equal(cache.tokens, 48);
    cache.clear();
    assert.equal(cache.tokens, 0);
  });
});
