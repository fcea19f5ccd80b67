/**
 * Property test of the deadline heap: random pushes and removals from anywhere keep the earliest
 * expiry on top and every entry's recorded index right.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeadlineHeap } from '../../proxy/admission/deadline-heap.js';
import { QueueEntry } from '../../proxy/admission/fair-queue.js';
import { TestTicket, seededRandom } from './test-ticket.js';

describe('deadline heap', () => {
  it('always yields the earliest expiry, with removals from anywhere (property)', () => {
    for (let seed = 1; seed <= 30; seed++) {
      const rnd = seededRandom(seed);
      const heap = new DeadlineHeap();
      const live = new Set<QueueEntry>();
      for (let step = 0; step < 500; step++) {
        if (rnd() < 0.6 || live.size === 0) {
          const e = new QueueEntry(
            new TestTicket('t', { deadlineMs: Math.floor(rnd() * 1000) }),
            0,
            Infinity,
          );
          heap.push(e);
          live.add(e);
        } else {
          const victims = [...live];
          const e = victims[Math.floor(rnd() * victims.length)]!;
          heap.remove(e);
          heap.remove(e);
          live.delete(e);
          assert.equal(e.heapIndex, -1);
        }
        assert.equal(heap.size, live.size);
        const min = Math.min(...[...live].map((e) => e.expiresMs));
        assert.equal(heap.peek()?.expiresMs ?? Infinity, min, `seed ${seed} step ${step}`);
      }
      let last = -Infinity;
      for (let e = heap.peek(); e !== null; e = heap.peek()) {
        assert.ok(e.expiresMs >= last);
        last = e.expiresMs;
        heap.remove(e);
      }
    }
  });
});
