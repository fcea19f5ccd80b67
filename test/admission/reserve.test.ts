/**
 * Reserved slots for tenants under their fair share: a heavy tenant fills the pool only up to the
 * limit minus the reserve while another tenant is active, a light tenant's arrival takes a reserved
 * slot at once (even with heavy queued), a tenant alone uses every slot, a queued tenant stays
 * active while it waits, and the reserve ends once the light tenant has been idle for the window
 * (which a reload can change). Manual clock, no timers.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import { ManualClock, TestTicket } from './test-ticket.js';

function controller(reservePerNode: number): { c: AdmissionController; clock: ManualClock } {
  const clock = new ManualClock();
  const c = new AdmissionController({
    maxInFlightPerNode: 4,
    nodes: 2,
    maxQueue: 100,
    maxWaitMs: 60_000,
    reservePerNode,
    reserveWindowMs: 2000,
    timers: false,
    clock: clock.now,
  });
  return { c, clock };
}

describe('admission reserve for tenants under their share', () => {
  it('lets a tenant alone use every slot', () => {
    const { c } = controller(1);
    for (let i = 0; i < 8; i++) assert.equal(c.offer(new TestTicket('heavy')), 'admitted', `slot ${i}`);
    assert.equal(c.offer(new TestTicket('heavy')), 'queued');
  });

  it('holds the reserve back from a tenant at its share while another is active, and gives it to the light one at once', () => {
    const { c, clock } = controller(1);
    const light1 = new TestTicket('light');
    assert.equal(c.offer(light1), 'admitted');
    for (let i = 0; i < 10; i++) c.offer(new TestTicket('heavy'));
    // 8 slots, 2 reserved: heavy fills the pool up to 6 and queues the rest, two slots stay free.
    assert.equal(c.inFlight, 6);
    assert.equal(c.queued, 5);
    // A light arrival takes a reserved slot at once, ahead of heavy's queue.
    clock.t += 10;
    assert.equal(c.offer(new TestTicket('light')), 'admitted');
    assert.equal(c.inFlight, 7);
    // A freed slot in the reserve does not go to heavy (at its share) while light is active.
    c.release(light1);
    assert.equal(c.inFlight, 6);
    assert.equal(c.queued, 5);
  });

  it('serves heavy in full again once light has been idle for the window', () => {
    const { c, clock } = controller(1);
    const light = new TestTicket('light');
    c.offer(light);
    const admitted: TestTicket[] = [];
    for (let i = 0; i < 10; i++) {
      const t = new TestTicket('heavy');
      if (c.offer(t) === 'admitted') admitted.push(t);
    }
    assert.equal(c.inFlight, 6);
    c.release(light);
    assert.equal(c.inFlight, 6, 'a heavy request took the slot below the reserve');
    clock.t += 2500;
    c.release(admitted[0]!);
    assert.equal(c.inFlight, 8, 'alone again, heavy fills every slot');
  });

  it('counts a tenant waiting in the queue as active however long it has waited', () => {
    const { c, clock } = controller(1);
    const heavy: TestTicket[] = [];
    for (let i = 0; i < 10; i++) {
      const t = new TestTicket('heavy');
      heavy.push(t);
      c.offer(t);
    }
    assert.equal(c.inFlight, 8, 'alone, heavy fills every slot');
    const light = new TestTicket('light');
    assert.equal(c.offer(light), 'queued');
    // No slot frees for longer than the window: light is still waiting, so still active.
    clock.t += 2500;
    c.release(heavy[0]!);
    assert.equal(light.admittedCalls, 1, 'the freed reserved slot goes to light, under its share');
    assert.equal(c.inFlight, 8);
  });

  it('applies a new reserve window from setCapacity (reload)', () => {
    const { c, clock } = controller(1);
    const light = new TestTicket('light');
    c.offer(light);
    const heavy: TestTicket[] = [];
    for (let i = 0; i < 10; i++) {
      const t = new TestTicket('heavy');
      if (c.offer(t) === 'admitted') heavy.push(t);
    }
    c.release(light);
    c.setCapacity(4, 2, 1, 100);
    assert.equal(c.inFlight, 6, 'light was seen just now');
    clock.t += 150;
    c.release(heavy[0]!);
    assert.equal(c.inFlight, 8, 'light idle for longer than the new window: heavy fills every slot');
  });

  it('gives a freed reserved slot to the tenant furthest below its share, not to one just under it', () => {
    // Two slots, one reserved; heavy (weight 2) has a share of 1.33 slots, light (weight 1) 0.67.
    const clock = new ManualClock();
    const c = new AdmissionController({
      maxInFlightPerNode: 2,
      nodes: 1,
      maxQueue: 100,
      maxWaitMs: 60_000,
      reservePerNode: 1,
      reserveWindowMs: 2000,
      timers: false,
      clock: clock.now,
    });
    const heavy = Array.from({ length: 12 }, () => new TestTicket('heavy', { weight: 2 }));
    for (const t of heavy) c.offer(t);
    assert.equal(c.inFlight, 2, 'heavy alone uses both slots');
    clock.t += 10;
    const light = new TestTicket('light', { weight: 1 });
    assert.equal(c.offer(light), 'queued');
    // Heavy's first request ends: the freed slot is in the reserve, and both tenants are under their
    // share (heavy holds 1 of 1.33, light 0 of 0.67). Light, further below, gets it.
    c.release(heavy[0]!);
    assert.equal(light.admittedCalls, 1, "light waited behind heavy's backlog");
    assert.equal(c.inFlight, 2);
  });

  it('behaves as before when the reserve is 0', () => {
    const { c } = controller(0);
    c.offer(new TestTicket('light'));
    for (let i = 0; i < 10; i++) c.offer(new TestTicket('heavy'));
    assert.equal(c.inFlight, 8);
    assert.equal(c.queued, 3);
  });
});

describe('admission reserve and priority classes', () => {
  it('never gives a reserved slot to a lower class while a higher one waits', () => {
    const { c } = controller(1);
    const log: string[] = [];
    // vip (class 10), alone at first, takes all 8 slots and queues 3 more; then low (class 0)
    // queues, far below its share of 4.
    const vip: TestTicket[] = [];
    for (let i = 0; i < 8; i++) {
      const t = new TestTicket('vip', { priority: 10, log });
      vip.push(t);
      assert.equal(c.offer(t), 'admitted');
    }
    for (let i = 0; i < 3; i++) assert.equal(c.offer(new TestTicket('vip', { priority: 10, log })), 'queued');
    assert.equal(c.offer(new TestTicket('low', { priority: 0, log })), 'queued');
    // Two slots free: both go to vip's queue, reserved or not: low may not go before a higher
    // class, and a reserve held for it would stay idle.
    for (const t of vip.slice(0, 2)) c.release(t);
    assert.deepEqual(
      log.map((id) => id.split('#')[0]),
      ['vip', 'vip'],
    );
    assert.equal(c.inFlight, 8);
    // The next freed slot goes to the last vip waiting, ahead of low, far under its share; then
    // the queue's top class is low's, and low gets the slot after.
    c.release(vip[2]!);
    c.release(vip[3]!);
    assert.deepEqual(
      log.map((id) => id.split('#')[0]),
      ['vip', 'vip', 'vip', 'low'],
    );
  });
});
