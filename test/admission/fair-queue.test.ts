/**
 * Tests of weighted fair queuing: the deficit round robin of one class (interleaving, weights,
 * costs, removal from the middle, tiny weights), and the controller's shares in a saturated pool
 * where one tenant offers ten times more than the other.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import { FairQueue, QueueEntry } from '../../proxy/admission/fair-queue.js';
import { ManualClock, TestTicket } from './test-ticket.js';

function entry(tenant: string, weight = 1, cost = 1): QueueEntry {
  return new QueueEntry(new TestTicket(tenant, { weight, cost }), 0, Infinity);
}

/** Pops everything, naming each entry by its tenant. */
function drainNames(q: FairQueue, max = 1000): string {
  let out = '';
  for (let e = q.pop(); e !== null && out.length < max; e = q.pop()) out += e.ticket.tenant;
  return out;
}

describe('fair queue (deficit round robin)', () => {
  it('interleaves tenants of equal weight however unequal their backlogs', () => {
    const q = new FairQueue(0);
    for (let i = 0; i < 10; i++) q.push(entry('A'));
    for (let i = 0; i < 3; i++) q.push(entry('B'));
    assert.equal(drainNames(q), 'ABABABAAAAAAA');
    assert.equal(q.size, 0);
  });

  it('serves tenants in proportion to their weights', () => {
    const q = new FairQueue(0);
    for (let i = 0; i < 8; i++) q.push(entry('A', 2));
    for (let i = 0; i < 8; i++) q.push(entry('B', 1));
    assert.equal(drainNames(q).slice(0, 12), 'AABAABAABAAB');
  });

  it('charges by cost: a tenant with costlier requests gets fewer of them', () => {
    const q = new FairQueue(0);
    for (let i = 0; i < 6; i++) q.push(entry('A', 1, 3));
    for (let i = 0; i < 20; i++) q.push(entry('B', 1, 1));
    const first16 = drainNames(q).slice(0, 16);
    const a = [...first16].filter((x) => x === 'A').length;
    assert.equal(a, 4, `A's share of cost is half: ${first16}`);
  });

  it('makes progress with tiny weights and large costs without looping per quantum', () => {
    const q = new FairQueue(0);
    for (let i = 0; i < 4; i++) q.push(entry('A', 0.001, 1000));
    for (let i = 0; i < 4; i++) q.push(entry('B', 0.002, 1000));
    const order = drainNames(q);
    assert.equal(order.length, 8);
    assert.equal(
      [...order.slice(0, 6)].filter((x) => x === 'B').length,
      4,
      `B (weight 2×) goes first more: ${order}`,
    );
  });

  it('keeps the round robin consistent when entries leave from the middle', () => {
    const q = new FairQueue(0);
    const a = [0, 1, 2].map(() => entry('A'));
    const b = [0, 1].map(() => entry('B'));
    const c = [entry('C')];
    for (const e of [...a, ...b, ...c]) q.push(e);
    q.remove(a[1]!);
    q.remove(b[0]!);
    q.remove(b[1]!);
    assert.equal(drainNames(q), 'ACA');
    q.push(entry('D'));
    assert.equal(drainNames(q), 'D', 'a drained queue accepts new tenants');
  });

  it('names the heaviest tenant by backlog per unit of weight', () => {
    const q = new FairQueue(0);
    for (let i = 0; i < 4; i++) q.push(entry('A', 4));
    const b = [entry('B', 1), entry('B', 1)];
    for (const e of b) q.push(e);
    assert.equal(q.heaviest()?.tenant, 'B');
    assert.equal(q.heaviest()?.tail, b[1], 'its newest entry is the one to evict');
  });
});

/**
 * Runs a saturated pool in discrete ticks: each tick every admitted request finishes (service time
 * one tick), then each tenant offers its quota. Counts admissions per tenant over the ticks where
 * both tenants had requests waiting.
 */
function saturate(
  offers: Record<string, number>,
  weights: Record<string, number>,
  ticks = 400,
): Record<string, number> {
  const clock = new ManualClock();
  const c = new AdmissionController({
    maxInFlightPerNode: 4,
    maxQueue: 200,
    maxWaitMs: 1e9,
    timers: false,
    clock: clock.now,
  });
  const running: TestTicket[] = [];
  const served: Record<string, number> = {};
  const queuedBy: Record<string, number> = {};
  const names = Object.keys(offers);
  for (const n of names) {
    served[n] = 0;
    queuedBy[n] = 0;
  }
  let measuring = false;
  for (let tick = 0; tick < ticks; tick++) {
    measuring = names.every((n) => queuedBy[n]! > 0);
    for (const t of running.splice(0)) c.release(t);
    for (const n of names) {
      for (let i = 0; i < offers[n]!; i++) {
        const t = new TestTicket(n, { weight: weights[n]! });
        t.onAdmitted = () => {
          queuedBy[n]!--;
          running.push(t);
          if (measuring) served[n]!++;
        };
        t.onRejected = () => {
          queuedBy[n]!--;
        };
        const r = c.offer(t);
        if (r === 'queued') queuedBy[n]!++;
        else if (r === 'admitted') running.push(t);
      }
    }
    clock.advance(10);
  }
  return served;
}

describe('weighted fair queuing in a saturated pool', () => {
  it('splits service 50/50 between equal weights while one tenant offers 10× more', () => {
    const served = saturate({ heavy: 30, light: 3 }, { heavy: 1, light: 1 });
    const total = served['heavy']! + served['light']!;
    assert.ok(total > 1000, `measured ${total} admissions`);
    const share = served['light']! / total;
    assert.ok(Math.abs(share - 0.5) < 0.03, `light tenant share ${share.toFixed(3)}`);
  });

  it('splits service 2:1 for weights 2 and 1', () => {
    const served = saturate({ a: 20, b: 20 }, { a: 2, b: 1 });
    const ratio = served['a']! / served['b']!;
    assert.ok(Math.abs(ratio - 2) < 0.1, `ratio ${ratio.toFixed(3)}`);
  });

  it('serves every request of a light tenant that asks for less than its share', () => {
    const c = new AdmissionController({
      maxInFlightPerNode: 4,
      maxQueue: 50,
      timers: false,
      clock: new ManualClock().now,
    });
    const running: TestTicket[] = [];
    let lightOk = 0;
    let lightRejected = 0;
    for (let tick = 0; tick < 200; tick++) {
      for (const t of running.splice(0)) c.release(t);
      for (let i = 0; i < 40; i++) {
        const t = new TestTicket('heavy');
        t.onAdmitted = () => running.push(t);
        if (c.offer(t) === 'admitted') running.push(t);
      }
      const l = new TestTicket('light');
      l.onAdmitted = () => {
        running.push(l);
        lightOk++;
      };
      l.onRejected = () => lightRejected++;
      const r = c.offer(l);
      if (r === 'admitted') {
        running.push(l);
        lightOk++;
      } else if (r !== 'queued') lightRejected++;
    }
    assert.equal(lightRejected, 0, 'no light request shed or evicted');
    assert.ok(lightOk >= 199, `light served ${lightOk} of 200`);
  });
});
