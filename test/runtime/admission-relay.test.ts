/**
 * The main thread's side of admission for pools with a reserve under `server.workers`
 * (proxy/runtime/admission-relay.ts), in one thread with a manual clock: worker requests offered,
 * admitted, queued and ended in the main thread's controller; a controller closed by a reload
 * keeps serving the worker requests it holds and closes after the last; a worker that dies gives
 * back what its requests held; a request that ended while its admission was on its way frees the
 * slot and teaches the adaptive limit nothing. (test/runtime/workers.test.ts runs it across threads.)
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AdmissionController } from '../../proxy/admission/admission-controller.js';
import {
  RemoteAdmissions,
  type AdmissionAnswer,
  type AdmissionOffer,
} from '../../proxy/runtime/admission-relay.js';
import { ManualClock, TestTicket } from '../admission/test-ticket.js';

function offer(id: number, tenant = 'heavy'): AdmissionOffer {
  return { t: 'adm-offer', id, pool: 'gpu', tenant, weight: 1, priority: 0, deadlineInMs: Infinity, cost: 1 };
}

function setup(adaptive = false): {
  c: AdmissionController;
  remote: RemoteAdmissions;
  answers: AdmissionAnswer[];
  send: (a: AdmissionAnswer) => void;
} {
  const clock = new ManualClock();
  const c = new AdmissionController({
    maxInFlightPerNode: 2,
    nodes: 1,
    maxQueue: 10,
    reservePerNode: 1,
    timers: false,
    clock: clock.now,
    adaptive: adaptive ? { minLimit: 1 } : null,
  });
  const answers: AdmissionAnswer[] = [];
  return { c, remote: new RemoteAdmissions(), answers, send: (a) => answers.push(a) };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('admission relay, the main thread side', () => {
  it("admits, queues and ends workers' requests in the main thread's controller", async () => {
    const { c, remote, answers, send } = setup();
    for (let id = 1; id <= 4; id++) remote.offer(1, offer(id), c, send);
    assert.deepEqual(
      answers.map((a) => [a.t, a.id]),
      [
        ['adm-admitted', 1],
        ['adm-admitted', 2],
      ],
    );
    assert.equal(c.inFlight, 2);
    assert.equal(c.queued, 2);
    remote.end(1, 1, 50);
    assert.deepEqual(answers[2], { t: 'adm-admitted', id: 3 }, 'the freed slot goes to the next queued');
    remote.end(1, 4, -1);
    assert.equal(c.queued, 0, 'a request that left the queue is taken out of it');
    remote.end(1, 2, 50);
    remote.end(1, 3, 50);
    await tick();
    assert.equal(c.inFlight, 0);
    assert.equal(remote.size, 0);
  });

  it('keeps a controller closed by a reload open for the worker requests it holds, then closes it', async () => {
    const { c, remote, answers, send } = setup();
    for (let id = 1; id <= 4; id++) remote.offer(2, offer(id), c, send);
    c.close();
    await tick();
    assert.equal(c.queued, 2, 'queued worker requests are not rejected by the close');
    remote.end(2, 1, 10);
    remote.end(2, 2, 10);
    assert.deepEqual(
      answers.slice(2).map((a) => [a.t, a.id]),
      [
        ['adm-admitted', 3],
        ['adm-admitted', 4],
      ],
    );
    remote.end(2, 3, 10);
    remote.end(2, 4, 10);
    await tick();
    // Now closed: a new offer is refused.
    const late = new TestTicket('x');
    assert.notEqual(c.offer(late), 'admitted');
  });

  it("gives back what a dead worker's requests held, and only that worker's", async () => {
    const { c, remote, send } = setup();
    remote.offer(1, offer(1), c, send);
    remote.offer(2, offer(1), c, send);
    remote.offer(1, offer(2), c, send);
    assert.equal(c.inFlight, 2);
    assert.equal(c.queued, 1);
    assert.equal(remote.workerDied(1), 2);
    await tick();
    assert.equal(c.inFlight, 1, "worker 2's request keeps its slot");
    assert.equal(c.queued, 0);
    assert.equal(remote.size, 1);
  });

  it('frees the slot of a request that ended while its admission was on its way, without a latency sample', () => {
    const { c, remote, send } = setup(true);
    remote.offer(1, offer(1), c, send);
    const before = c.adaptive!.shortLatencyMs;
    remote.end(1, 1, -1);
    assert.equal(c.inFlight, 0);
    assert.equal(c.adaptive!.shortLatencyMs, before, 'no sample taken');
  });
});
