/**
 * Unit tests of the rate-limit response headers and messages: OpenAI's duration format, which
 * headers appear when, `retry-after` rounding, `x-should-retry` on hard rejections, and messages
 * that name the tenant and the limit.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessStore } from '../../proxy/ratelimit/in-process-store.js';
import { RateLimitDecision } from '../../proxy/ratelimit/rate-limit-decision.js';
import {
  formatResetDuration,
  rateLimitHeaders,
  rateLimitMessage,
} from '../../proxy/ratelimit/rate-limit-headers.js';
import { RateLimiter } from '../../proxy/ratelimit/rate-limiter.js';

function limiter(): RateLimiter {
  let t = 0;
  return new RateLimiter({
    store: new InProcessStore({ clock: () => (t += 0) }),
    tenants: {
      acme: { requestsPerMinute: 60, tokensPerMinute: 6000, models: { big: { tokensPerMinute: 1000 } } },
    },
  });
}

function check(l: RateLimiter, model: string | null, tokens: number): RateLimitDecision {
  const d = l.check(l.forTenant('acme'), model, tokens);
  assert.ok(d instanceof RateLimitDecision);
  return d;
}

/** Headers as a map, asserting no name appears twice. */
function asMap(flat: string[]): Map<string, string> {
  const m = new Map<string, string>();
  for (let i = 0; i < flat.length; i += 2) {
    assert.ok(!m.has(flat[i]!), `duplicate header ${flat[i]}`);
    m.set(flat[i]!, flat[i + 1]!);
  }
  return m;
}

describe('rate-limit headers', () => {
  it('formats durations the way OpenAI does', () => {
    const cases: [number, string][] = [
      [0, '0s'],
      [-5, '0s'],
      [0.2, '1ms'],
      [59, '59ms'],
      [999, '999ms'],
      [1000, '1s'],
      [1500, '1.5s'],
      [1005, '1.005s'],
      [1050, '1.05s'],
      [60_070, '1m0.07s'],
      [8640, '8.64s'],
      [59_999, '59.999s'],
      [60_000, '1m0s'],
      [360_000, '6m0s'],
      [361_250, '6m1.25s'],
      [3_600_000, '1h0m0s'],
      [3_723_000, '1h2m3s'],
    ];
    for (const [ms, text] of cases) assert.equal(formatResetDuration(ms), text, `${ms} ms`);
  });

  it('reports requests and tokens limits on an admitted request, without retry headers', () => {
    const h = asMap(rateLimitHeaders(check(limiter(), null, 600)));
    assert.equal(h.get('x-ratelimit-limit-requests'), '60');
    assert.equal(h.get('x-ratelimit-remaining-requests'), '59');
    assert.equal(h.get('x-ratelimit-reset-requests'), '1s');
    assert.equal(h.get('x-ratelimit-limit-tokens'), '6000');
    assert.equal(h.get('x-ratelimit-remaining-tokens'), '5400');
    assert.equal(h.get('x-ratelimit-reset-tokens'), '6s');
    assert.equal(h.has('retry-after'), false);
    assert.equal(h.has('x-should-retry'), false);
  });

  it('reports the most constrained tokens bucket (the model bucket here)', () => {
    const h = asMap(rateLimitHeaders(check(limiter(), 'big', 100)));
    assert.equal(h.get('x-ratelimit-limit-tokens'), '1000');
    assert.equal(h.get('x-ratelimit-remaining-tokens'), '900');
  });

  it('adds retry-after in whole seconds (at least 1) and retry-after-ms on a rejection', () => {
    const l = limiter();
    check(l, null, 5990);
    const d = check(l, null, 20); // 10 tokens short at 100/s: 100 ms
    assert.equal(d.allowed, false);
    const h = asMap(rateLimitHeaders(d));
    assert.equal(h.get('retry-after'), '1');
    assert.equal(h.get('retry-after-ms'), '100');
    assert.equal(h.get('x-ratelimit-remaining-tokens'), '10');
    assert.equal(h.has('x-should-retry'), false);
    d.retryAfterMs = 2001;
    assert.equal(asMap(rateLimitHeaders(d)).get('retry-after'), '3');
  });

  it('says x-should-retry: false when the request can never fit', () => {
    const d = check(limiter(), 'big', 1001);
    assert.equal(d.hard, true);
    const h = asMap(rateLimitHeaders(d));
    assert.equal(h.get('x-should-retry'), 'false');
    assert.ok(h.has('retry-after'));
  });

  it('appends to the array it is given', () => {
    const out = ['x-request-id', 'abc'];
    assert.equal(rateLimitHeaders(check(limiter(), null, 1), out), out);
    assert.equal(out[0], 'x-request-id');
    assert.ok(out.length > 2);
  });

  it('writes messages naming the tenant, model and limit', () => {
    const l = limiter();
    assert.equal(rateLimitMessage(check(l, null, 1)), '');
    const hard = check(l, 'big', 5000);
    assert.match(
      rateLimitMessage(hard),
      /Request too large .*tenant acme on model big.*limit 1000, requested 5000/,
    );
    for (let i = 0; i < 70; i++) check(l, null, 0);
    assert.match(
      rateLimitMessage(check(l, null, 0)),
      /requests per minute \(tenant acme\): limit 60\. Please try again in \d/,
    );
  });
});
