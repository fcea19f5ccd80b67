/**
 * The retry and hedge budget never admits more than its bound over any period: extra attempts
 * ≤ percent % × the requests alive in the period + min_per_second × its seconds + the
 * max(min_per_second, 1) tokens it may hold when the period starts. Healthy traffic before an
 * outage must not fund a burst of retries in it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TokenBudget } from '../../proxy/pool/token-budget.js';
import { seededRandom } from '../admission/test-ticket.js';

/** One request of a run: when it was deposited and released, ms, and when its extra attempts were granted. */
interface Req {
  start: number;
  end: number;
}

interface Run {
  reqs: Req[];
  /** Times of granted extra attempts, ms. */
  grants: number[];
}

/** Number of sorted `xs` below `v` (`orEqual`: at most `v`). */
function countBelow(xs: readonly number[], v: number, orEqual: boolean): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid]! < v || (orEqual && xs[mid] === v)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Checks the budget's bound for every period [from, to] given: grants in it ≤ share × requests
 * alive in it + minPerSecond × its seconds + max(minPerSecond, 1).
 */
function checkBound(
  run: Run,
  percent: number,
  minPerSecond: number,
  periods: readonly (readonly [number, number])[],
): void {
  const starts = run.reqs.map((r) => r.start).sort((a, b) => a - b);
  const ends = run.reqs.map((r) => r.end).sort((a, b) => a - b);
  const grants = [...run.grants].sort((a, b) => a - b);
  for (const [from, to] of periods) {
    // Alive: started by `to` and not ended before `from`.
    const alive =
      run.reqs.length - (starts.length - countBelow(starts, to, true)) - countBelow(ends, from, false);
    const granted = countBelow(grants, to, true) - countBelow(grants, from, false);
    const bound = (percent / 100) * alive + (minPerSecond * (to - from)) / 1000 + Math.max(minPerSecond, 1);
    assert.ok(
      granted <= bound + 1e-9,
      `${granted} extra attempts in [${from}, ${to}] ms with ${alive} requests alive (bound ${bound.toFixed(2)})`,
    );
  }
}

/**
 * A pool's traffic with `concurrency` requests at a time, each lasting `durationMs`: healthy
 * (no extra attempt wanted) for `healthy` requests, then failing for `failing` requests, each of
 * which asks for up to `retries` extra attempts during its life.
 */
function outage(
  budget: TokenBudget,
  opts: { healthy: number; failing: number; concurrency: number; durationMs: number; retries: number },
): { run: Run; outageStart: number; outageEnd: number } {
  const run: Run = { reqs: [], grants: [] };
  let now = 1000;
  let outageStart = 0;
  const total = opts.healthy + opts.failing;
  for (let i = 0; i < total; i += opts.concurrency) {
    if (i >= opts.healthy && outageStart === 0) outageStart = now;
    const batch = Math.min(opts.concurrency, total - i);
    for (let k = 0; k < batch; k++) budget.deposit();
    const start = now;
    for (let k = 0; k < batch; k++) {
      if (i + k < opts.healthy) continue;
      for (let r = 0; r < opts.retries; r++) {
        const at = now + ((r + 1) * opts.durationMs) / (opts.retries + 1);
        if (budget.tryWithdraw(at)) run.grants.push(at);
      }
    }
    now += opts.durationMs;
    for (let k = 0; k < batch; k++) {
      budget.release();
      run.reqs.push({ start, end: now });
    }
  }
  return { run, outageStart, outageEnd: now };
}

describe('token budget', { timeout: 30_000 }, () => {
  it('funds no burst of retries at the start of an outage from the healthy traffic before it', () => {
    // 600 healthy requests, then 100 failing ones (8 at a time, ~0.6 s), each wanting 3 retries.
    const budget = new TokenBudget(20, 5);
    const { run, outageStart, outageEnd } = outage(budget, {
      healthy: 600,
      failing: 100,
      concurrency: 8,
      durationMs: 48,
      retries: 3,
    });
    checkBound(run, 20, 5, [[outageStart, outageEnd]]);
    // With 20 % of 100 requests plus the minimum, retries were still made.
    assert.ok(run.grants.length >= 20, `${run.grants.length} retries granted`);
  });

  it('lets every request of a concurrent burst hedge at a 100 % budget', () => {
    const budget = new TokenBudget(100, 0);
    for (let i = 0; i < 4; i++) budget.deposit();
    let granted = 0;
    for (let i = 0; i < 4; i++) if (budget.tryWithdraw(1000)) granted++;
    assert.equal(granted, 4);
  });

  it('allows one extra attempt per 1 / percent requests at concurrency 1 without a minimum', () => {
    const budget = new TokenBudget(5, 0);
    let granted = 0;
    for (let i = 0; i < 200; i++) {
      budget.deposit();
      if (budget.tryWithdraw(1000 + i)) granted++;
      budget.release();
    }
    assert.ok(granted >= 9 && granted <= 10, `${granted} extra attempts for 200 requests at 5 %`);
  });

  for (const [percent, minPerSecond] of [
    [20, 5],
    [100, 0],
    [5, 0],
    [50, 2],
  ] as const) {
    it(`never admits more than its bound over any period (percent ${percent}, min_per_second ${minPerSecond})`, () => {
      for (let seed = 1; seed <= 20; seed++) {
        const rnd = seededRandom(seed * 7919 + percent);
        const budget = new TokenBudget(percent, minPerSecond);
        const run: Run = { reqs: [], grants: [] };
        // Requests arrive, ask for extra attempts while alive, and end, in random order and
        // at random times; some periods are healthy (no extra attempt asked), others fail.
        const live: Req[] = [];
        let now = 1000;
        for (let step = 0; step < 600; step++) {
          now += Math.floor(rnd() * 40);
          const failing = Math.floor(now / 1500) % 2 === 1;
          const x = rnd();
          if (x < 0.4 || live.length === 0) {
            budget.deposit();
            live.push({ start: now, end: -1 });
          } else if (x < 0.7) {
            const r = live.splice(Math.floor(rnd() * live.length), 1)[0]!;
            r.end = now;
            budget.release();
            run.reqs.push(r);
          } else if (failing && budget.tryWithdraw(now)) run.grants.push(now);
        }
        for (const r of live) {
          r.end = now;
          run.reqs.push(r);
        }
        // Every period from an event (a request's start, a grant) to a grant.
        const froms = [...new Set([...run.grants, ...run.reqs.map((r) => r.start)])];
        const periods: [number, number][] = [];
        for (const from of froms) for (const to of run.grants) if (to >= from) periods.push([from, to]);
        checkBound(run, percent, minPerSecond, periods);
      }
    });
  }
});
