/**
 * Property tests of the admission controller: randomised sequences of offers, releases, cancels,
 * clock jumps with expiry, and capacity changes, checked against a model after every step. No
 * ticket is lost or duplicated: each ends in exactly one of admitted-then-released, rejected or
 * cancelled; the pool never exceeds its limit and never idles with work queued (with reserved
 * slots: never below the limit minus the reserve); the queue stays bounded; nothing is served past
 * its expiry; without a reserve, a higher class is always dequeued first.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import { AdmissionRejection, type AdmissionRejectReason } from '../../proxy/admission/admission-ticket.js';
import { ManualClock, seededRandom } from './test-ticket.js';

type State = 'new' | 'queued' | 'admitted' | 'released' | 'rejected' | 'cancelled';

/** A ticket that enforces legal transitions and reports illegal ones to the test. */
class ModelTicket {
  state: State = 'new';
  readonly tenant: string;
  readonly weight: number;
  readonly priority: number;
  readonly deadlineMs: number;
  readonly cost = 1;
  slotSinceMs = -1;
  slotOwner: object | null = null;
  expiresMs = Infinity;
  reason: AdmissionRejectReason | null = null;
  readonly world: World;

  constructor(world: World, tenant: string, weight: number, priority: number, deadlineMs: number) {
    this.world = world;
    this.tenant = tenant;
    this.weight = weight;
    this.priority = priority;
    this.deadlineMs = deadlineMs;
  }

  onAdmitted(): void {
    assert.equal(this.state, 'queued', 'onAdmitted for a ticket that was not queued');
    assert.ok(this.world.clock.t < this.expiresMs, 'served at or after its expiry');
    // Reserved slots go to tenants under their share, whatever their class.
    for (const t of this.world.strictPriority ? this.world.tickets : []) {
      if (t !== this && t.state === 'queued') {
        assert.ok(
          t.priority <= this.priority,
          `admitted class ${this.priority} while class ${t.priority} waited`,
        );
      }
    }
    this.state = 'admitted';
  }

  onRejected(r: AdmissionRejection): void {
    assert.equal(this.state, 'queued', 'onRejected for a ticket that was not queued');
    assert.ok(r.retryAfterMs >= 1);
    this.state = 'rejected';
    this.reason = r.reason;
  }
}

interface World {
  clock: ManualClock;
  tickets: ModelTicket[];
  /** False when slots are reserved (they may go to a lower class under its share). */
  strictPriority: boolean;
}

const TENANTS: [string, number][] = [
  ['a', 1],
  ['b', 2],
  ['c', 0.5],
  ['d', 1],
];

/** `reserve`: run with slots reserved for tenants under their share (1 or 2 per node). */
function runSequence(seed: number, steps: number, reserve = false): void {
  const rnd = seededRandom(seed);
  const pick = <T>(xs: T[]): T | undefined => xs[Math.floor(rnd() * xs.length)];
  const world: World = { clock: new ManualClock(0), tickets: [], strictPriority: !reserve };
  const maxQueue = Math.floor(rnd() * 12);
  const maxWaitMs = 50 + rnd() * 200;
  let perNode = 1 + Math.floor(rnd() * 3);
  let nodes = 1 + Math.floor(rnd() * 2);
  const reservePerNode = reserve ? 1 + Math.floor(rnd() * 2) : 0;
  const c = new AdmissionController({
    maxInFlightPerNode: perNode,
    nodes,
    maxQueue,
    maxWaitMs,
    reservePerNode,
    reserveWindowMs: reserve ? rnd() * 200 : undefined,
    timers: false,
    clock: world.clock.now,
  });
  const where = (op: string, step: number): string => `seed ${seed} step ${step} (${op})`;

  for (let step = 0; step < steps; step++) {
    const r = rnd();
    let op: string;
    if (r < 0.45) {
      op = 'offer';
      const [tenant, weight] = pick(TENANTS)!;
      const deadline = rnd() < 0.5 ? Infinity : world.clock.t + rnd() * 300;
      const t = new ModelTicket(world, tenant, weight, Math.floor(rnd() * 3), deadline);
      world.tickets.push(t);
      t.state = 'queued'; // provisional: callbacks may fire during offer (evictions of others only)
      const result = c.offer(t);
      if (result === 'admitted') t.state = 'admitted';
      else if (result === 'queued') {
        t.expiresMs = Math.min(t.deadlineMs, world.clock.t + maxWaitMs);
      } else {
        assert.ok(result instanceof AdmissionRejection);
        t.state = 'rejected';
        t.reason = result.reason;
      }
    } else if (r < 0.75) {
      op = 'release';
      const t = pick(world.tickets.filter((x) => x.state === 'admitted'));
      if (t !== undefined) {
        assert.equal(c.release(t), true, where(op, step));
        t.state = 'released';
      }
    } else if (r < 0.85) {
      op = 'cancel';
      const t = pick(world.tickets);
      if (t !== undefined) {
        const wasQueued = t.state === 'queued';
        assert.equal(c.cancel(t), wasQueued, where(op, step));
        if (wasQueued) t.state = 'cancelled';
      }
    } else if (r < 0.97) {
      op = 'tick';
      world.clock.advance(rnd() * 80);
      c.expire();
      for (const t of world.tickets) {
        if (t.state === 'queued')
          assert.ok(t.expiresMs > world.clock.t, `${where(op, step)}: expired entry kept`);
      }
    } else {
      op = 'capacity';
      perNode = 1 + Math.floor(rnd() * 3);
      nodes = Math.floor(rnd() * 3);
      c.setCapacity(perNode, nodes);
    }

    const admitted = world.tickets.filter((t) => t.state === 'admitted').length;
    const queued = world.tickets.filter((t) => t.state === 'queued').length;
    assert.equal(c.inFlight, admitted, `${where(op, step)}: in-flight count`);
    assert.equal(c.queued, queued, `${where(op, step)}: queued count`);
    assert.ok(queued <= maxQueue, `${where(op, step)}: queue over its bound`);
    const reserved = Math.max(0, Math.min(reservePerNode * nodes, c.limit - 1));
    if (queued > 0) {
      assert.ok(c.inFlight >= c.limit - reserved, `${where(op, step)}: idle slots with work queued`);
    }
    if (op === 'offer' || op === 'release') {
      // Between capacity changes the limit holds (a shrink may leave more in flight until releases).
      assert.ok(c.inFlight <= Math.max(c.limit, admitted), where(op, step));
    }
  }

  // Drain: close the queue, release everything still running.
  c.close();
  for (const t of world.tickets) if (t.state === 'admitted') assert.equal(c.release(t), true);
  for (const t of world.tickets) if (t.state === 'admitted') t.state = 'released';
  const terminal = new Set<State>(['released', 'rejected', 'cancelled']);
  for (const t of world.tickets) assert.ok(terminal.has(t.state), `seed ${seed}: ticket left in ${t.state}`);
  assert.equal(c.inFlight, 0);
  assert.equal(c.queued, 0);

  // The counters tell the same story as the tickets.
  const k = c.counters;
  const released = world.tickets.filter((t) => t.state === 'released').length;
  const rejected = world.tickets.filter((t) => t.state === 'rejected').length;
  const cancelled = world.tickets.filter((t) => t.state === 'cancelled').length;
  assert.equal(k.admittedImmediately + k.admittedFromQueue, released, `seed ${seed}: admissions`);
  assert.equal(k.released, released);
  assert.equal(k.cancelled, cancelled);
  assert.equal(
    k.rejectedQueueFull + k.rejectedEvicted + k.rejectedQueueTimeout + k.rejectedDeadline + k.rejectedClosed,
    rejected,
    `seed ${seed}: rejections`,
  );
  assert.equal(world.tickets.length, released + rejected + cancelled);
}

describe('admission controller property', () => {
  it('never loses or duplicates a ticket over random offer/release/cancel/deadline sequences', () => {
    for (let seed = 1; seed <= 150; seed++) runSequence(seed, 400);
  });

  it('holds its invariants over long sequences', () => {
    for (let seed = 1000; seed < 1005; seed++) runSequence(seed, 5000);
  });

  it('never loses or duplicates a ticket with slots reserved for tenants under their share', () => {
    for (let seed = 1; seed <= 150; seed++) runSequence(seed, 400, true);
    for (let seed = 1000; seed < 1005; seed++) runSequence(seed, 5000, true);
  });
});
