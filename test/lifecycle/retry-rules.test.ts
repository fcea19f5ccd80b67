/**
 * Retry rules: an upstream Retry-After is honoured but clamped, backoff is full jitter within its
 * exponential ceiling, and only retryable failures map to a retry kind.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Errors } from '../../proxy/lifecycle/errors.js';
import {
  backoffMs,
  retryAfterMs,
  retryBitForError,
  retryBitForStatus,
} from '../../proxy/lifecycle/retry-rules.js';
import { RetryOn } from '../../proxy/route/route-table.js';

describe('retry rules', () => {
  it('reads Retry-After in seconds or as an HTTP date, clamped to the route maximum', () => {
    assert.equal(retryAfterMs('1', 2000), 1000);
    assert.equal(retryAfterMs('30', 2000), 2000);
    assert.equal(retryAfterMs(new Date(Date.now() + 60_000).toUTCString(), 5000), 5000);
    assert.equal(retryAfterMs('soon', 2000), 0);
    assert.equal(retryAfterMs(undefined, 2000), 0);
    assert.equal(retryAfterMs('0', 2000), 0);
  });

  it('draws backoff uniformly below min(max, base x 2^(n-1))', () => {
    let sawLarge = false;
    for (let i = 0; i < 2000; i++) {
      const b = backoffMs(3, 25, 1000); // ceiling 100 ms
      assert.ok(b >= 0 && b < 100, `backoff ${b}`);
      if (b > 75) sawLarge = true;
      assert.ok(backoffMs(10, 25, 250) < 250);
    }
    assert.ok(sawLarge, 'the whole range is used (full jitter)');
  });

  it('retries 5xx, 429, connect failures, resets and TTFB timeouts, nothing else', () => {
    assert.equal(retryBitForStatus(503), RetryOn.status5xx);
    assert.equal(retryBitForStatus(429), RetryOn.status429);
    assert.equal(retryBitForStatus(404), 0);
    assert.equal(retryBitForError(Errors.connectFailed), RetryOn.connectFailure);
    assert.equal(retryBitForError(Errors.upstreamReset), RetryOn.reset);
    assert.equal(retryBitForError(Errors.ttfbTimeout), RetryOn.timeout);
    assert.equal(retryBitForError(Errors.idleTimeout), 0);
    assert.equal(retryBitForError(Errors.invalidRequest), 0);
  });
});
