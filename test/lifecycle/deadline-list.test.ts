/**
 * Per-route deadlines under one timer: entries fire in deadline order, exactly once, never after
 * they left the list, and the one timer fires on its own for real deadlines.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeadlineList, type DeadlineEntry } from '../../proxy/lifecycle/deadline-list.js';
import { nowMs } from '../../proxy/lifecycle/clock.js';

class Entry implements DeadlineEntry {
  deadlineAt = 0;
  dlPrev: DeadlineEntry | null = null;
  dlNext: DeadlineEntry | null = null;
  dlList: DeadlineList | null = null;
  fired = 0;
  constructor(
    readonly name: string,
    readonly log: string[],
  ) {}
  onDeadline(): void {
    this.fired++;
    this.log.push(this.name);
  }
}

describe('deadline list', { timeout: 10_000 }, () => {
  it('fires expired entries in order, once each, and skips removed ones', () => {
    const log: string[] = [];
    const list = new DeadlineList(10_000);
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((n) => new Entry(n, log)) as [Entry, Entry, Entry, Entry];
    const t0 = nowMs();
    list.add(a, t0);
    list.add(b, t0 + 10);
    list.add(c, t0 + 20);
    list.add(d, t0 + 30);
    assert.equal(list.size, 4);
    list.remove(c);
    list.remove(c);
    assert.equal(list.size, 3);
    list.expire(t0 + 10_010);
    assert.deepEqual(log, ['a', 'b']);
    list.expire(t0 + 10_010);
    assert.deepEqual(log, ['a', 'b'], 'nothing fires twice');
    list.expire(t0 + 10_030);
    assert.deepEqual(log, ['a', 'b', 'd']);
    assert.equal(c.fired, 0);
    assert.equal(list.size, 0);
    assert.equal(a.dlList, null);
    list.close();
  });

  it('removes the head, the tail and a lone entry', () => {
    const log: string[] = [];
    const list = new DeadlineList(10_000);
    const [a, b] = [new Entry('a', log), new Entry('b', log)];
    const t0 = nowMs();
    list.add(a, t0);
    list.add(b, t0);
    list.remove(a);
    list.remove(b);
    assert.equal(list.size, 0);
    list.add(a, t0 + 1);
    list.expire(t0 + 20_000);
    assert.deepEqual(log, ['a']);
    list.close();
  });

  it('renews an entry: it moves to the tail with a fresh deadline and does not fire at its old one', () => {
    const log: string[] = [];
    const list = new DeadlineList(1_000);
    const [a, b, c] = ['a', 'b', 'c'].map((n) => new Entry(n, log)) as [Entry, Entry, Entry];
    const t0 = Math.floor(nowMs()); // whole milliseconds: the sums below are exact
    list.add(a, t0);
    list.add(b, t0 + 10);
    list.renew(a, t0 + 500); // a gap ended: a's deadline is now t0 + 1500, after b's
    list.renew(b, t0 + 600); // b is no longer the tail either
    list.renew(b, t0 + 700); // b is the tail: only its deadline moves
    assert.equal(a.deadlineAt, t0 + 1_500);
    assert.equal(b.deadlineAt, t0 + 1_700);
    list.renew(c, t0 + 700); // not in the list: nothing happens
    assert.equal(c.dlList, null);
    assert.equal(list.size, 2);
    list.expire(t0 + 1_100);
    assert.deepEqual(log, [], 'neither fires at its first deadline');
    list.expire(t0 + 1_500);
    assert.deepEqual(log, ['a']);
    list.expire(t0 + 1_700);
    assert.deepEqual(log, ['a', 'b']);
    assert.equal(list.size, 0);
    list.close();
  });

  it('fires real deadlines from its single timer', async () => {
    const log: string[] = [];
    const list = new DeadlineList(40);
    const keep = setInterval(() => undefined, 1000); // the list's timer is unref'd
    try {
      const t0 = nowMs();
      list.add(new Entry('first', log), t0);
      await new Promise((r) => setTimeout(r, 15));
      list.add(new Entry('second', log), nowMs());
      const deadline = Date.now() + 5000;
      while (log.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      assert.deepEqual(log, ['first', 'second']);
      assert.ok(nowMs() - t0 >= 40);
    } finally {
      clearInterval(keep);
      list.close();
    }
  });

  it('refuses a duration that is not positive', () => {
    assert.throws(() => new DeadlineList(0), RangeError);
  });
});
