/**
 * Tests of the adaptive (gradient) concurrency limit: it rises while latency stays near its
 * long-run minimum, falls when latency climbs above it, stays within its bounds, does not grow
 * while the pool is under-used, and drives the admission controller's limit.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AdaptiveLimit } from '../../proxy/admission/adaptive-limit.js';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import { ManualClock, TestTicket } from './test-ticket.js';

/** Feeds `n` samples of `latencyMs`, with the pool using all of the current limit. */
function feed(a: AdaptiveLimit, latencyMs: number, n: number): number[] {
  const limits: number[] = [];
  for (let i = 0; i < n; i++) limits.push(a.observe(latencyMs, a.limit));
  return limits;
}

describe('adaptive limit', () => {
  it('rises towards the maximum while latency stays at its minimum, never past it', () => {
    const a = new AdaptiveLimit({ minLimit: 2, maxLimit: 100, initialLimit: 10 });
    const limits = feed(a, 100, 200);
    for (let i = 1; i < limits.length; i++) assert.ok(limits[i]! >= limits[i - 1]!, 'never falls');
    assert.equal(a.limit, 100);
    assert.ok(limits[20]! > 10, `grew early: ${limits[20]}`);
  });

  it('falls when latency rises well above the long-run minimum, never below the minimum limit', () => {
    const a = new AdaptiveLimit({ minLimit: 6, maxLimit: 100, initialLimit: 80 });
    feed(a, 100, 50);
    const high = feed(a, 400, 60);
    assert.ok(high[high.length - 1]! < 40, `limit after 60 slow samples: ${high[high.length - 1]}`);
    for (let i = 1; i < high.length; i++) assert.ok(high[i]! <= high[i - 1]!, 'keeps falling while slow');
    feed(a, 2000, 150);
    assert.equal(a.limit, 6, 'bounded below');
  });

  it('tolerates latency within tolerance × the minimum without shrinking', () => {
    const a = new AdaptiveLimit({ maxLimit: 50, initialLimit: 30, tolerance: 1.5 });
    feed(a, 100, 30);
    const before = a.limit;
    feed(a, 140, 30);
    assert.ok(a.limit >= before, `${before} → ${a.limit}`);
  });

  it('recovers once latency returns to its minimum', () => {
    const a = new AdaptiveLimit({ maxLimit: 64, initialLimit: 64 });
    feed(a, 50, 20);
    feed(a, 300, 80);
    const low = a.limit;
    assert.ok(low < 20, `fell to ${low}`);
    feed(a, 50, 300);
    assert.ok(a.limit > low * 2, `rose back to ${a.limit}`);
  });

  it('does not grow while less than half of the limit is in use', () => {
    const a = new AdaptiveLimit({ maxLimit: 100, initialLimit: 20 });
    for (let i = 0; i < 100; i++) a.observe(100, 5);
    assert.equal(a.limit, 20);
  });

  it('rejects a tolerance below 1 and a smoothing outside (0, 1]', () => {
    assert.throws(() => new AdaptiveLimit({ maxLimit: 10, tolerance: 0.9 }), /tolerance/);
    assert.throws(() => new AdaptiveLimit({ maxLimit: 10, smoothing: 0 }), /smoothing/);
  });

  it('lowers the controller limit when latency rises, queueing what no longer fits', () => {
    const clock = new ManualClock();
    const c = new AdmissionController({
      maxInFlightPerNode: 16,
      nodes: 2,
      adaptive: { minLimit: 2 },
      timers: false,
      clock: clock.now,
    });
    assert.equal(c.limit, 32, 'starts at the static capacity');
    const running: TestTicket[] = [];
    const cycle = (latencyMs: number): void => {
      while (c.inFlight < c.limit) {
        const t = new TestTicket('a');
        if (c.offer(t) !== 'admitted') break;
        running.push(t);
      }
      for (const t of running.splice(0)) c.release(t, latencyMs);
    };
    for (let i = 0; i < 5; i++) cycle(100);
    assert.equal(c.limit, 32);
    for (let i = 0; i < 5; i++) cycle(500);
    assert.ok(c.limit < 16, `limit ${c.limit}`);
    const held = Array.from({ length: c.limit }, () => new TestTicket('a'));
    for (const t of held) assert.equal(c.offer(t), 'admitted');
    assert.equal(c.offer(new TestTicket('a')), 'queued', 'the lower limit is enforced');
    c.setCapacity(4, 2);
    assert.ok(c.limit <= 8, 'never above the static capacity');
  });
});
