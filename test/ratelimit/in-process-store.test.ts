/**
 * Unit and property tests of the in-process store's token buckets with a manual clock: exact
 * admission of a burst, continuous refill, all-or-nothing multi-bucket takes, adjustments below
 * zero, reload keeping levels, and randomised sequences that must never admit more than
 * capacity + rate × T in any window of T ms.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InProcessStore } from '../../proxy/ratelimit/in-process-store.js';
import { TakeStatus } from '../../proxy/ratelimit/rate-limit-store.js';
import { BucketUnit } from '../../proxy/ratelimit/token-bucket.js';
import { ManualClock } from '../helpers/manual-clock.js';

/** Deterministic PRNG (mulberry32) so a failing sequence can be replayed from its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MINUTE = 60_000;

describe('in-process store', () => {
  it('admits exactly N of a burst of 2N with N per minute configured', () => {
    for (const n of [1, 7, 60, 1000]) {
      const clock = new ManualClock();
      const store = new InProcessStore({ clock: clock.now });
      const b = store.bucket('t:req', BucketUnit.requests, n, n / MINUTE);
      let admitted = 0;
      const levels = [0];
      for (let i = 0; i < 2 * n; i++) if (store.take([b], 0, levels) === TakeStatus.ok) admitted++;
      assert.equal(admitted, n, `N = ${n}`);
    }
  });

  it('refills continuously: one more request every 60 000 / N ms after the burst', () => {
    const clock = new ManualClock();
    const store = new InProcessStore({ clock: clock.now });
    const b = store.bucket('t:req', BucketUnit.requests, 60, 60 / MINUTE);
    const levels = [0];
    for (let i = 0; i < 60; i++) store.take([b], 0, levels);
    assert.equal(store.take([b], 0, levels), TakeStatus.rejected);
    clock.advance(999);
    assert.equal(store.take([b], 0, levels), TakeStatus.rejected);
    clock.advance(1);
    assert.equal(store.take([b], 0, levels), TakeStatus.ok);
    assert.equal(store.take([b], 0, levels), TakeStatus.rejected);
    clock.advance(10 * MINUTE);
    assert.equal(store.level('t:req'), 60, 'never refills past capacity');
  });

  it('debits all buckets or none: a request refused by its tokens bucket keeps its request', () => {
    const clock = new ManualClock();
    const store = new InProcessStore({ clock: clock.now });
    const req = store.bucket('t:req', BucketUnit.requests, 10, 10 / MINUTE);
    const tok = store.bucket('t:tok', BucketUnit.tokens, 100, 100 / MINUTE);
    const levels = [0, 0];
    assert.equal(store.take([req, tok], 80, levels), TakeStatus.ok);
    assert.deepEqual(levels, [9, 20]);
    assert.equal(store.take([req, tok], 30, levels), TakeStatus.rejected);
    assert.deepEqual(levels, [9, 20], 'levels reported undebited');
    assert.equal(store.level('t:req'), 9);
    assert.equal(store.level('t:tok'), 20);
  });

  it('lets an adjustment debit below zero and makes later takes wait for the overdraft', () => {
    const clock = new ManualClock();
    const store = new InProcessStore({ clock: clock.now });
    const tok = store.bucket('t:tok', BucketUnit.tokens, 600, 600 / MINUTE);
    store.adjust([tok], 0, -900);
    assert.equal(store.level('t:tok'), -300);
    const levels = [0];
    assert.equal(store.take([tok], 1, levels), TakeStatus.rejected);
    clock.advance(30_001); // -300 + 300.01
    assert.equal(store.take([tok], 1, levels), TakeStatus.rejected);
    clock.advance(100);
    assert.equal(store.take([tok], 1, levels), TakeStatus.ok);
  });

  it('caps a refund at capacity', () => {
    const store = new InProcessStore({ clock: new ManualClock().now });
    const tok = store.bucket('t:tok', BucketUnit.tokens, 100, 100 / MINUTE);
    store.adjust([tok], 0, 500);
    assert.equal(store.level('t:tok'), 100);
  });

  it('keeps a bucket level across a re-declaration and applies a lower capacity at once', () => {
    const clock = new ManualClock();
    const store = new InProcessStore({ clock: clock.now });
    const a = store.bucket('t:req', BucketUnit.requests, 100, 100 / MINUTE);
    const levels = [0];
    for (let i = 0; i < 30; i++) store.take([a], 0, levels);
    const b = store.bucket('t:req', BucketUnit.requests, 100, 100 / MINUTE);
    assert.equal(b, a, 'one shared state object per key');
    assert.equal(store.level('t:req'), 70);
    store.bucket('t:req', BucketUnit.requests, 50, 50 / MINUTE);
    assert.equal(store.level('t:req'), 50);
  });

  it('never admits more than capacity + rate × T in any window of T ms over random arrivals (property)', () => {
    for (let seed = 1; seed <= 40; seed++) {
      const rnd = random(seed);
      const clock = new ManualClock(0);
      const store = new InProcessStore({ clock: clock.now });
      const perMinute = 1 + Math.floor(rnd() * 500);
      const rate = perMinute / MINUTE;
      const b = store.bucket('p:req', BucketUnit.requests, perMinute, rate);
      const tok = store.bucket('p:tok', BucketUnit.tokens, perMinute * 50, (perMinute * 50) / MINUTE);
      const levels = [0, 0];
      let admitted = 0;
      let elapsed = 0;
      // Worst window ending now: max over start times s of (admitted since s) − rate × (now − s),
      // kept as max(previous − rate × gap, 0) + this admission. It must never exceed the capacity.
      let requestExcess = 0;
      let tokenExcess = 0;
      for (let step = 0; step < 3000; step++) {
        // Mostly bursts over the rate, now and then idle long enough to refill the buckets fully.
        const r = rnd();
        const gap = r < 0.7 ? 0 : r < 0.98 ? (rnd() * 3 * MINUTE) / perMinute : rnd() * 2 * MINUTE;
        clock.advance(gap);
        elapsed += gap;
        requestExcess = Math.max(requestExcess - rate * gap, 0);
        tokenExcess = Math.max(tokenExcess - rate * 50 * gap, 0);
        const cost = Math.floor(rnd() * 120);
        if (store.take([b, tok], cost, levels) === TakeStatus.ok) {
          admitted++;
          requestExcess += 1;
          tokenExcess += cost;
        }
        assert.ok(requestExcess <= perMinute + 1e-6, `seed ${seed} step ${step}: requests over`);
        assert.ok(tokenExcess <= perMinute * 50 + 1e-6, `seed ${seed} step ${step}: tokens over`);
      }
      // Liveness: the limiter is not stuck below its rate either.
      assert.ok(admitted >= Math.min(3000, rate * elapsed) * 0.5, `seed ${seed}: admitted only ${admitted}`);
    }
  });
});
