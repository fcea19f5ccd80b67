/**
 * Passive outlier ejection and slow start through `PoolHealth`, driven by hand-fed attempt outcomes
 * and a manual clock: the exact threshold, the reset by a success, growing and capped ejection
 * times, their decay, the share cap and the last-node rule, and the ramp of a returning node. One
 * test runs on the real clock to show the pool's own timer ends ejections and ramps.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HealthEventKind, type PoolHealthOptions } from '../../proxy/health/health-options.js';
import { PoolHealth } from '../../proxy/health/pool-health.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { closeNodes, EventLog, idleNodes, ManualClock, waitFor } from './health-test-kit.js';

const healths: PoolHealth[] = [];

function pool(nodes: UpstreamNode[], options: PoolHealthOptions): PoolHealth {
  const h = new PoolHealth('test', options);
  healths.push(h);
  h.update(nodes, options);
  return h;
}

function fail(h: PoolHealth, node: UpstreamNode, times: number): void {
  for (let i = 0; i < times; i++) h.recordFailure(node, 'HTTP 502');
}

function nodeSnap(h: PoolHealth, node: UpstreamNode) {
  const s = h.snapshot().nodes.find((n) => n.id === node.id);
  assert.ok(s, `node ${node.id} in snapshot`);
  return s;
}

afterEach(async () => {
  for (const h of healths.splice(0)) h.close();
  await closeNodes();
});

describe('outlier ejection', () => {
  it('ejects a node on exactly the consecutive failure that reaches the threshold, not one before', () => {
    const clock = new ManualClock();
    const log = new EventLog();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], { outlier: { consecutiveFailures: 5 }, now: clock.now, onEvent: log.onEvent });
    fail(h, a, 4);
    assert.equal(a.available, true);
    assert.equal(nodeSnap(h, a).consecutiveFailures, 4);
    assert.equal(log.of(HealthEventKind.ejected).length, 0);
    h.recordFailure(a, 'ECONNRESET');
    assert.equal(a.available, false);
    assert.equal(b.available, true);
    const ejected = log.of(HealthEventKind.ejected);
    assert.equal(ejected.length, 1);
    assert.match(ejected[0]!.reason, /5 consecutive failures \(last: ECONNRESET\)/);
    assert.equal(nodeSnap(h, a).ejected, true);
  });

  it('starts counting again after a success', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], { outlier: { consecutiveFailures: 3 }, now: clock.now });
    fail(h, a, 2);
    h.recordSuccess(a);
    assert.equal(nodeSnap(h, a).consecutiveFailures, 0);
    fail(h, a, 2);
    assert.equal(a.available, true);
    fail(h, a, 1);
    assert.equal(a.available, false);
  });

  it('keeps a node out for baseEjectionMs and lets it back exactly when the time is up', () => {
    const clock = new ManualClock();
    const log = new EventLog();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 1, baseEjectionMs: 1000 },
      slowStartMs: 0,
      now: clock.now,
      onEvent: log.onEvent,
    });
    fail(h, a, 1);
    assert.equal(nodeSnap(h, a).ejectedForMs, 1000);
    clock.advance(999);
    h.refresh();
    assert.equal(a.available, false);
    assert.equal(nodeSnap(h, a).ejectedForMs, 1);
    clock.advance(1);
    h.refresh();
    assert.equal(a.available, true);
    assert.equal(a.weightFactor, 1, 'slow start is off');
    assert.deepEqual(
      log.events.map((e) => e.kind),
      [HealthEventKind.ejected, HealthEventKind.ejectionEnded, HealthEventKind.returned],
    );
  });

  it('ejects for base × n on the n-th ejection, capped at maxEjectionMs', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 2, baseEjectionMs: 1000, maxEjectionMs: 2500 },
      now: clock.now,
    });
    const durations: number[] = [];
    for (let i = 0; i < 4; i++) {
      fail(h, a, 2);
      const s = nodeSnap(h, a);
      assert.equal(s.ejectionCount, i + 1);
      durations.push(s.ejectedForMs);
      clock.advance(s.ejectedForMs);
      h.refresh();
      assert.equal(a.available, true);
    }
    assert.deepEqual(durations, [1000, 2000, 2500, 2500]);
  });

  it('forgets one past ejection per ejectionDecayMs of health', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 1, baseEjectionMs: 100, maxEjectionMs: 10_000, ejectionDecayMs: 5000 },
      now: clock.now,
    });
    for (let i = 0; i < 3; i++) {
      fail(h, a, 1);
      clock.advance(nodeSnap(h, a).ejectedForMs);
      h.refresh();
    }
    assert.equal(nodeSnap(h, a).ejectionCount, 3);
    clock.advance(4999);
    assert.equal(nodeSnap(h, a).ejectionCount, 3);
    clock.advance(1);
    assert.equal(nodeSnap(h, a).ejectionCount, 2);
    clock.advance(5000);
    fail(h, a, 1);
    // Two periods forgot two of three ejections: this is the second, 2 × 100 ms.
    assert.equal(nodeSnap(h, a).ejectionCount, 2);
    assert.equal(nodeSnap(h, a).ejectedForMs, 200);
  });

  it('does not count failures of attempts that end while the node is ejected', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 3, baseEjectionMs: 1000 },
      slowStartMs: 0,
      now: clock.now,
    });
    fail(h, a, 3);
    fail(h, a, 10);
    assert.equal(nodeSnap(h, a).consecutiveFailures, 0);
    clock.advance(1000);
    h.refresh();
    assert.equal(a.available, true);
    fail(h, a, 2);
    assert.equal(a.available, true, 'a returned node needs a fresh streak');
    fail(h, a, 1);
    assert.equal(a.available, false);
  });

  it('never ejects more than maxEjectionPercent of the pool at once', () => {
    const clock = new ManualClock();
    const log = new EventLog();
    const nodes = idleNodes(4);
    const [a, b, c] = nodes as [UpstreamNode, UpstreamNode, UpstreamNode];
    const h = pool(nodes, {
      outlier: { consecutiveFailures: 2, baseEjectionMs: 1000, maxEjectionPercent: 50 },
      now: clock.now,
      onEvent: log.onEvent,
    });
    fail(h, a, 2);
    fail(h, b, 2);
    assert.equal(h.snapshot().ejected, 2);
    fail(h, c, 5);
    assert.equal(c.available, true, 'a third ejection would put 75% out');
    assert.equal(h.snapshot().ejected, 2);
    const skipped = log.of(HealthEventKind.ejectionSkipped);
    assert.equal(skipped.length, 1, 'a refused ejection is reported once per streak');
    assert.match(skipped[0]!.reason, /2 of 4 nodes are ejected and the cap is 50%/);
    clock.advance(1000);
    h.refresh();
    assert.equal(h.snapshot().ejected, 0);
    fail(h, c, 1);
    assert.equal(c.available, false, 'with room under the cap the next failure ejects it');
  });

  it('never ejects the last available node of a pool, whatever the cap', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], { outlier: { consecutiveFailures: 1, maxEjectionPercent: 100 }, now: clock.now });
    fail(h, a, 1);
    fail(h, b, 3);
    assert.equal(a.available, false);
    assert.equal(b.available, true);

    const [solo] = idleNodes(1) as [UpstreamNode];
    const h1 = pool([solo], { outlier: { consecutiveFailures: 1, maxEjectionPercent: 100 }, now: clock.now });
    fail(h1, solo, 10);
    assert.equal(solo.available, true);
    assert.equal(h1.snapshot().ejected, 0);
  });

  it('counts only nodes that serve for the last-node rule: a drained or weight-0 one does not', () => {
    const clock = new ManualClock();
    const [a, drained] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    drained.setDrained(true);
    const h = pool([a, drained], {
      outlier: { consecutiveFailures: 1, maxEjectionPercent: 100 },
      now: clock.now,
    });
    fail(h, a, 5);
    assert.equal(a.available, true, 'the only node serving is kept');

    const [b, idle] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const hw = new PoolHealth('w', {
      outlier: { consecutiveFailures: 1, maxEjectionPercent: 100 },
      now: clock.now,
    });
    hw.update(
      [b, idle],
      { outlier: { consecutiveFailures: 1, maxEjectionPercent: 100 }, now: clock.now },
      new Set([idle]),
    );
    for (let i = 0; i < 5; i++) hw.recordFailure(b, 'ECONNRESET');
    assert.equal(b.available, true, 'a weight-0 node cannot stand in for it');
    // A failing drained node may go: it takes no traffic from anyone.
    for (let i = 0; i < 3; i++) h.recordFailure(drained, 'ECONNRESET');
    assert.equal(drained.available, false);
    hw.close();
  });

  it('ejects nothing when consecutiveFailures is 0', () => {
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], { outlier: { consecutiveFailures: 0 } });
    fail(h, a, 100);
    assert.equal(a.available, true);
    assert.equal(nodeSnap(h, a).consecutiveFailures, 0);
  });

  it('ignores outcomes of nodes that are not in the pool', () => {
    const [a, b, stranger] = idleNodes(3) as [UpstreamNode, UpstreamNode, UpstreamNode];
    const h = pool([a, b], { outlier: { consecutiveFailures: 1 } });
    fail(h, stranger, 5);
    h.recordSuccess(stranger);
    assert.equal(stranger.available, true);
    assert.equal(h.snapshot().nodes.length, 2);
  });
});

describe('slow start', () => {
  it('leaves nodes present at first start at full weight', () => {
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    pool([a, b], { slowStartMs: 30_000 });
    assert.equal(a.weightFactor, 1);
    assert.equal(b.weightFactor, 1);
  });

  it('ramps a node returning from ejection linearly from minWeightFactor to 1', () => {
    const clock = new ManualClock();
    const log = new EventLog();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 1, baseEjectionMs: 500 },
      slowStartMs: 1000,
      minWeightFactor: 0.2,
      now: clock.now,
      onEvent: log.onEvent,
    });
    fail(h, a, 1);
    clock.advance(500);
    h.refresh();
    assert.equal(a.available, true);
    assert.equal(a.weightFactor, 0.2);
    const seen: number[] = [a.weightFactor];
    for (let i = 0; i < 4; i++) {
      clock.advance(250);
      h.refresh();
      seen.push(a.weightFactor);
    }
    assert.deepEqual(
      seen.map((f) => Math.round(f * 1000) / 1000),
      [0.2, 0.4, 0.6, 0.8, 1],
    );
    assert.equal(log.of(HealthEventKind.slowStartDone).length, 1);
    assert.equal(b.weightFactor, 1, 'the node that never left is untouched');
  });

  it('returns a node at full weight at once when slowStartMs is 0', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 1, baseEjectionMs: 100 },
      slowStartMs: 0,
      now: clock.now,
    });
    fail(h, a, 1);
    clock.advance(100);
    h.refresh();
    assert.equal(a.available, true);
    assert.equal(a.weightFactor, 1);
  });

  it('ends an ejection and completes the ramp on its own timer, with no refresh calls', async () => {
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const h = pool([a, b], {
      outlier: { consecutiveFailures: 1, baseEjectionMs: 40 },
      slowStartMs: 150,
      minWeightFactor: 0.1,
    });
    fail(h, a, 1);
    assert.equal(a.available, false);
    await waitFor(() => a.available, 'the ejection to end');
    assert.ok(a.weightFactor < 1, `ramping, got ${a.weightFactor}`);
    let rose = false;
    const first = a.weightFactor;
    await waitFor(() => {
      if (a.weightFactor > first && a.weightFactor < 1) rose = true;
      return a.weightFactor === 1;
    }, 'the weight factor to reach 1');
    assert.ok(rose, 'the factor passed through intermediate values');
  });
});
