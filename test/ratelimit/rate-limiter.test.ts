/**
 * Unit tests of the rate limiter over the in-process store with a manual clock: every limit
 * (requests, tokens, concurrency, per model), what a rejection consumes (nothing), retry delays,
 * hard rejections, pre-debit and reconciliation in both directions, refunds, defaults for unlisted
 * tenants, configuration errors and reloads.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessStore } from '../../proxy/ratelimit/in-process-store.js';
import { RateLimitConfigError } from '../../proxy/ratelimit/limit-set.js';
import { RateLimitDecision, RateLimitReason } from '../../proxy/ratelimit/rate-limit-decision.js';
import { RateLimiter, type RateLimitConfig } from '../../proxy/ratelimit/rate-limiter.js';
import { FailMode, TakeStatus, type RateLimitStore } from '../../proxy/ratelimit/rate-limit-store.js';

const MINUTE = 60_000;

function setup(config: RateLimitConfig): {
  limiter: RateLimiter;
  store: InProcessStore;
  advance: (ms: number) => void;
} {
  let t = 0;
  const store = new InProcessStore({ clock: () => t });
  const limiter = new RateLimiter({ store, ...config });
  return { limiter, store, advance: (ms) => (t += ms) };
}

/** The in-process store answers synchronously; a promise here would be a bug. */
function sync(d: RateLimitDecision | Promise<RateLimitDecision>): RateLimitDecision {
  assert.ok(d instanceof RateLimitDecision, 'the in-process store decides synchronously');
  return d;
}

describe('rate limiter', () => {
  it('counts held concurrency slots and reserved tokens until each request is released or refunded', () => {
    const { limiter } = setup({ tenants: { acme: { tokensPerMinute: 100_000, maxConcurrent: 4 } } });
    const acme = limiter.forTenant('acme');
    const a = sync(limiter.check(acme, null, 300));
    const b = sync(limiter.check(acme, null, 200));
    assert.equal(limiter.concurrentRequests, 2);
    assert.equal(limiter.reservedTokens, 500);
    limiter.reconcile(a, 10);
    assert.equal(limiter.reservedTokens, 500, 'a reconciled request holds its reservation until it ends');
    limiter.release(a);
    limiter.release(a);
    assert.equal(limiter.concurrentRequests, 1);
    assert.equal(limiter.reservedTokens, 200);
    limiter.refund(b);
    limiter.release(b);
    assert.equal(limiter.concurrentRequests, 0);
    assert.equal(limiter.reservedTokens, 0);
  });

  it('admits exactly N of a burst of 2N requests per minute', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 100 } } });
    const acme = limiter.forTenant('acme');
    let admitted = 0;
    for (let i = 0; i < 200; i++) if (sync(limiter.check(acme, null, 0)).allowed) admitted++;
    assert.equal(admitted, 100);
    assert.equal(limiter.counters.admitted, 100);
    assert.equal(limiter.counters.rejectedRequests, 100);
  });

  it('reports the limit, remaining and reset of the requests bucket', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 60 } } });
    const acme = limiter.forTenant('acme');
    const d = sync(limiter.check(acme, null, 0));
    assert.equal(d.limitRequests, 60);
    assert.equal(d.remainingRequests, 59);
    assert.equal(d.resetRequestsMs, 1000);
    assert.equal(d.limitTokens, -1, 'no tokens limit configured');
  });

  it('says when to retry: the time the bucket needs to hold the request again', () => {
    const { limiter, advance } = setup({ tenants: { acme: { requestsPerMinute: 60 } } });
    const acme = limiter.forTenant('acme');
    for (let i = 0; i < 60; i++) sync(limiter.check(acme, null, 0));
    advance(250);
    const d = sync(limiter.check(acme, null, 0));
    assert.equal(d.allowed, false);
    assert.equal(d.reason, RateLimitReason.requests);
    assert.equal(d.retryAfterMs, 750);
    assert.equal(d.remainingRequests, 0);
    assert.equal(d.hard, false);
    advance(750);
    assert.equal(sync(limiter.check(acme, null, 0)).allowed, true, 'the suggested wait suffices');
  });

  it('pre-debits the token estimate and rejects what does not fit, consuming nothing', () => {
    const { limiter, store } = setup({
      tenants: { acme: { requestsPerMinute: 100, tokensPerMinute: 1000 } },
    });
    const acme = limiter.forTenant('acme');
    const a = sync(limiter.check(acme, null, 700));
    assert.equal(a.allowed, true);
    assert.equal(a.remainingTokens, 300);
    const b = sync(limiter.check(acme, null, 400));
    assert.equal(b.allowed, false);
    assert.equal(b.reason, RateLimitReason.tokens);
    assert.equal(b.retryAfterMs, 6000, '100 tokens at 1000/min');
    assert.equal(store.level('{acme}:req'), 99, 'the rejected request took no request');
    assert.equal(store.level('{acme}:tok'), 300);
  });

  it('rejects a request larger than the tokens bucket as hard (never retry) without consuming', () => {
    const { limiter, store } = setup({
      tenants: { acme: { tokensPerMinute: 1000 } },
      maxRetryAfterMs: 20_000,
    });
    const acme = limiter.forTenant('acme');
    const d = sync(limiter.check(acme, null, 1001));
    assert.equal(d.allowed, false);
    assert.equal(d.hard, true);
    assert.equal(d.reason, RateLimitReason.tokens);
    assert.equal(d.retryAfterMs, 20_000);
    assert.equal(store.level('{acme}:tok'), 1000);
    assert.equal(sync(limiter.check(acme, null, 1000)).allowed, true, 'exactly the capacity fits');
  });

  it('refunds unused tokens at reconciliation', () => {
    const { limiter, store } = setup({ tenants: { acme: { tokensPerMinute: 1000 } } });
    const acme = limiter.forTenant('acme');
    const d = sync(limiter.check(acme, null, 600));
    assert.equal(store.level('{acme}:tok'), 400);
    limiter.reconcile(d, 150);
    assert.equal(store.level('{acme}:tok'), 850);
    assert.equal(d.debitedTokens, 150);
    limiter.reconcile(d, 0);
    assert.equal(store.level('{acme}:tok'), 850, 'reconciles at most once');
  });

  it('debits extra usage below zero so the next requests wait for it', () => {
    const { limiter, store, advance } = setup({ tenants: { acme: { tokensPerMinute: 600 } } });
    const acme = limiter.forTenant('acme');
    const d = sync(limiter.check(acme, null, 500));
    limiter.reconcile(d, 1100);
    assert.equal(store.level('{acme}:tok'), -500);
    const next = sync(limiter.check(acme, null, 10));
    assert.equal(next.allowed, false);
    assert.equal(next.retryAfterMs, 51_000, '510 tokens at 600/min');
    assert.equal(next.remainingTokens, 0);
    advance(51_000);
    assert.equal(sync(limiter.check(acme, null, 10)).allowed, true);
  });

  it('refunds a request turned away after the check (its request, tokens and slot)', () => {
    const { limiter, store } = setup({
      tenants: { acme: { requestsPerMinute: 10, tokensPerMinute: 1000, maxConcurrent: 1 } },
    });
    const acme = limiter.forTenant('acme');
    const d = sync(limiter.check(acme, null, 300));
    assert.equal(sync(limiter.check(acme, null, 1)).reason, RateLimitReason.concurrency);
    limiter.refund(d);
    limiter.refund(d);
    assert.equal(store.level('{acme}:req'), 10);
    assert.equal(store.level('{acme}:tok'), 1000);
    assert.equal(sync(limiter.check(acme, null, 1)).allowed, true, 'the slot was released');
  });

  it('limits concurrent requests until one is released', () => {
    const { limiter } = setup({ tenants: { acme: { maxConcurrent: 2 } }, concurrencyRetryAfterMs: 250 });
    const acme = limiter.forTenant('acme');
    const a = sync(limiter.check(acme, null, 0));
    const b = sync(limiter.check(acme, null, 0));
    const c = sync(limiter.check(acme, null, 0));
    assert.deepEqual([a.allowed, b.allowed, c.allowed], [true, true, false]);
    assert.equal(c.reason, RateLimitReason.concurrency);
    assert.equal(c.retryAfterMs, 250);
    limiter.release(a);
    limiter.release(a);
    assert.equal(sync(limiter.check(acme, null, 0)).allowed, true);
    assert.equal(sync(limiter.check(acme, null, 0)).allowed, false, 'a double release freed one slot only');
  });

  it('gives back the concurrency slot of a request its buckets reject', () => {
    const { limiter } = setup({ tenants: { acme: { maxConcurrent: 1, requestsPerMinute: 1 } } });
    const acme = limiter.forTenant('acme');
    const a = sync(limiter.check(acme, null, 0));
    limiter.release(a);
    const b = sync(limiter.check(acme, null, 0));
    assert.equal(b.reason, RateLimitReason.requests);
    assert.equal(acme.base.concurrency[0]!.inFlight, 0, 'the rejected check holds no slot');
    const c = sync(limiter.check(acme, null, 0));
    assert.equal(c.reason, RateLimitReason.requests, 'not concurrency: nothing was left held');
  });

  it('applies per-model limits on top of the tenant limits, and only to that model', () => {
    const { limiter } = setup({
      tenants: { acme: { requestsPerMinute: 10, models: { big: { requestsPerMinute: 2 } } } },
    });
    const acme = limiter.forTenant('acme');
    const big = [0, 1, 2].map(() => sync(limiter.check(acme, 'big', 0)).allowed);
    assert.deepEqual(big, [true, true, false]);
    const d = sync(limiter.check(acme, 'big', 0));
    assert.equal(d.limitRequests, 2, 'headers report the tighter bucket');
    let small = 0;
    for (let i = 0; i < 20; i++) if (sync(limiter.check(acme, 'small', 0)).allowed) small++;
    assert.equal(small, 8, 'the tenant-wide bucket counted the 2 requests to big');
    assert.equal(sync(limiter.check(acme, null, 0)).allowed, false);
  });

  it('gives each unlisted tenant its own buckets from the defaults', () => {
    const { limiter } = setup({ defaults: { requestsPerMinute: 1 } });
    const a = limiter.forTenant('a');
    const b = limiter.forTenant('b');
    assert.equal(limiter.forTenant('a'), a, 'compiled once');
    assert.equal(sync(limiter.check(a, null, 0)).allowed, true);
    assert.equal(sync(limiter.check(a, null, 0)).allowed, false);
    assert.equal(sync(limiter.check(b, null, 0)).allowed, true);
  });

  it('admits everything, without headers, for a tenant with no limits', () => {
    const { limiter } = setup({});
    const d = sync(limiter.check(limiter.forTenant('free'), 'm', 1e9));
    assert.equal(d.allowed, true);
    assert.equal(d.limitRequests, -1);
    assert.equal(d.limitTokens, -1);
  });

  it('charges a request with a non-numeric token estimate as zero tokens, never as free passage', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 1, tokensPerMinute: 10 } } });
    const acme = limiter.forTenant('acme');
    assert.equal(sync(limiter.check(acme, null, Number.NaN)).allowed, true);
    assert.equal(sync(limiter.check(acme, null, Number.NaN)).allowed, false, 'the request still counted');
    const big = sync(limiter.check(acme, 'm', Infinity));
    assert.equal(big.hard, true);
  });

  it('bounds the retry delay by max_retry_after_ms', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 1 } }, maxRetryAfterMs: 5000 });
    const acme = limiter.forTenant('acme');
    sync(limiter.check(acme, null, 0));
    assert.equal(sync(limiter.check(acme, null, 0)).retryAfterMs, 5000);
  });

  it('keeps levels and in-flight counts across a reload that changes the limits', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 10, maxConcurrent: 5 } } });
    const old = limiter.forTenant('acme');
    const held = [0, 1, 2, 3].map(() => sync(limiter.check(old, null, 0)));
    limiter.configure({ tenants: { acme: { requestsPerMinute: 20, maxConcurrent: 5 } } });
    const raised = limiter.forTenant('acme');
    assert.notEqual(raised, old);
    const d = sync(limiter.check(raised, null, 0));
    assert.equal(d.remainingRequests, 5, 'a raise keeps the level (6 left, not 20)');
    assert.equal(sync(limiter.check(raised, null, 0)).allowed, false, 'the 4 held slots still count: 5 of 5');
    for (const h of held) limiter.release(h);
    assert.equal(
      sync(limiter.check(raised, null, 0)).allowed,
      true,
      'old decisions release into the same counter',
    );
    limiter.configure({ tenants: { acme: { requestsPerMinute: 2 } } });
    const lowered = limiter.forTenant('acme');
    const burst = [0, 1, 2].map(() => sync(limiter.check(lowered, null, 0)).allowed);
    assert.deepEqual(burst, [true, true, false], 'a lower capacity caps the level at once');
  });

  it('rejects invalid limits with an error naming the tenant and field, changing nothing', () => {
    const { limiter } = setup({ tenants: { acme: { requestsPerMinute: 10 } } });
    const bad: RateLimitConfig[] = [
      { tenants: { acme: { requestsPerMinute: 0 } } },
      { tenants: { acme: { tokensPerMinute: -1 } } },
      { tenants: { acme: { maxConcurrent: 1.5 } } },
      { tenants: { acme: { models: { m: { requestsPerMinute: Number.NaN } } } } },
      { defaults: { requestsPerMinute: 0.5 } },
    ];
    for (const c of bad) assert.throws(() => limiter.configure(c), RateLimitConfigError);
    assert.throws(
      () => limiter.configure({ tenants: { acme: { models: { m: { maxConcurrent: 0 } } } } }),
      /tenant "acme" model "m": max_concurrent must be an integer >= 1/,
    );
    assert.equal(limiter.forTenant('acme').base.buckets[0]!.capacity, 10, 'the old limits stay');
  });
});

/** A store that is always unavailable, to test the fail modes without Redis. */
function downStore(failMode: FailMode): RateLimitStore {
  const inner = new InProcessStore();
  return {
    kind: 'down',
    failMode,
    counters: inner.counters,
    bucket: (key, unit, capacity, rate) => inner.bucket(key, unit, capacity, rate),
    take: () => TakeStatus.unavailable,
    adjust: () => undefined,
    close: () => inner.close(),
  };
}

describe('rate limiter with an unavailable store', () => {
  it('fails open: admits, marked degraded, without rate-limit headers', () => {
    const limiter = new RateLimiter({
      store: downStore(FailMode.open),
      tenants: { a: { requestsPerMinute: 1 } },
    });
    const d = sync(limiter.check(limiter.forTenant('a'), null, 0));
    assert.equal(d.allowed, true);
    assert.equal(d.degraded, true);
    assert.equal(d.limitRequests, -1);
    assert.equal(limiter.counters.admittedDegraded, 1);
  });

  it('fails closed: rejects as unavailable and releases the concurrency slot', () => {
    const limiter = new RateLimiter({
      store: downStore(FailMode.closed),
      tenants: { a: { requestsPerMinute: 1, maxConcurrent: 1 } },
      unavailableRetryAfterMs: 2000,
    });
    const a = limiter.forTenant('a');
    const d = sync(limiter.check(a, null, 0));
    assert.equal(d.allowed, false);
    assert.equal(d.reason, RateLimitReason.unavailable);
    assert.equal(d.retryAfterMs, 2000);
    assert.equal(a.base.concurrency[0]!.inFlight, 0);
    assert.equal(limiter.counters.rejectedUnavailable, 1);
  });
});

describe('rate limiter property', () => {
  it('never admits more than capacity + rate × T in any window of T ms, with reconciliation (property)', () => {
    let seed = 7;
    const rnd = (): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    for (let run = 0; run < 20; run++) {
      const rpm = 5 + Math.floor(rnd() * 100);
      const tpm = 1000 + Math.floor(rnd() * 10_000);
      const { limiter, advance } = setup({
        tenants: { t: { requestsPerMinute: rpm, tokensPerMinute: tpm } },
      });
      const t = limiter.forTenant('t');
      // Worst window ending now, as max(previous − rate × gap, 0) + what this request took.
      let requestExcess = 0;
      let tokenExcess = 0;
      for (let i = 0; i < 1500; i++) {
        // Mostly over the rate, now and then idle long enough to refill the buckets fully.
        const r = rnd();
        const gap = r < 0.6 ? 0 : r < 0.98 ? (rnd() * MINUTE) / rpm : rnd() * 2 * MINUTE;
        advance(gap);
        requestExcess = Math.max(requestExcess - (rpm / MINUTE) * gap, 0);
        tokenExcess = Math.max(tokenExcess - (tpm / MINUTE) * gap, 0);
        const estimate = Math.floor(rnd() * (tpm / 4));
        const d = sync(limiter.check(t, null, estimate));
        if (!d.allowed) continue;
        // Usage lands under or over the estimate; the books count what was really used.
        const used = Math.floor(estimate * rnd() * 1.5);
        limiter.reconcile(d, used);
        requestExcess += 1;
        tokenExcess += used;
        assert.ok(requestExcess <= rpm + 1e-6, `run ${run} step ${i}: requests over`);
        // Overdraft is allowed (usage above the estimate), but only by what the last request overran.
        assert.ok(tokenExcess <= tpm + estimate * 0.5 + 1e-6, `run ${run} step ${i}: tokens over`);
      }
    }
  });
});
