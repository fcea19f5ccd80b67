/**
 * A pool's live capacity estimate from sampled counters, driven by a manual clock: the observed
 * inputs (items/s, time per call by Little's law, batch size and where the per-node concurrency
 * comes from), the sliding window, reloads, and the monitor that keeps one tracker per pool.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PoolConfig } from '../../config/types.js';
import { MicroBatcherStats } from '../../proxy/batch/batch-stats.js';
import { CapacityMonitor } from '../../proxy/capacity/capacity-monitor.js';
import { capacityView } from '../../proxy/capacity/capacity-view.js';
import { CapacityCounters, CapacityWindow } from '../../proxy/capacity/capacity-window.js';
import {
  CallsPerNodeSource,
  PoolCapacityTracker,
  type CapacityBatcher,
  type CapacityPoolSource,
} from '../../proxy/capacity/pool-capacity.js';
import { waitFor } from '../helpers/sluice.js';

interface FakeNode {
  inFlight: number;
  attempts: number;
  available: boolean;
  drained: boolean;
}

function node(inFlight = 0): FakeNode {
  return { inFlight, attempts: 0, available: true, drained: false };
}

/** The pool config keys the tracker reads; the rest of a pool does not matter here. */
function poolConfig(
  name: string,
  extra: { admission?: number; maxInFlight?: number; target?: number; windowMs?: number } = {},
): PoolConfig {
  return {
    name,
    max_in_flight_per_node: extra.maxInFlight ?? 0,
    ...(extra.admission === undefined ? {} : { admission: { max_in_flight_per_node: extra.admission } }),
    ...(extra.target === undefined && extra.windowMs === undefined
      ? {}
      : { capacity: { target_utilisation: extra.target ?? 0.7, window_ms: extra.windowMs ?? 60_000 } }),
  } as unknown as PoolConfig;
}

function source(config: PoolConfig, nodes: FakeNode[], batchers: CapacityBatcher[] = []): CapacityPoolSource {
  return { name: config.name, config, nodes, batchers };
}

/**
 * Runs the tracker from `fromMs` to `toMs` in `stepMs` ticks; `each` changes the counters before
 * every sample (one tick's worth of traffic). Returns the end time.
 */
function drive(
  tracker: PoolCapacityTracker,
  src: CapacityPoolSource,
  fromMs: number,
  toMs: number,
  stepMs: number,
  each: () => void,
): number {
  let t = fromMs;
  while (t < toMs) {
    t += stepMs;
    each();
    tracker.sample(src, t);
  }
  return t;
}

void describe('PoolCapacityTracker', () => {
  void it('measures items/s, time per call and the recommendation of an unbatched pool with an admission limit', () => {
    const nodes = [node(3), node(1)];
    const src = source(poolConfig('gpu', { admission: 4, target: 0.5, windowMs: 2000 }), nodes);
    const tracker = new PoolCapacityTracker(src, 0);
    let i = 0;
    // 40 calls/s (one per 25 ms tick), always 4 in flight: Little's law gives 4 ÷ 40/s = 100 ms.
    drive(tracker, src, 0, 3000, 25, () => void nodes[i++ % 2]!.attempts++);
    const r = tracker.latest;
    assert.equal(r.spanMs, 2000);
    assert.equal(r.itemsPerSecond, 40);
    assert.equal(r.upstreamCallsPerSecond, 40);
    assert.equal(r.meanCallsInFlight, 4);
    assert.equal(r.timePerItemMs, 100);
    assert.equal(r.itemsPerCall, 1);
    assert.equal(r.callsPerNode, 4);
    assert.equal(r.callsPerNodeSource, CallsPerNodeSource.admission);
    assert.equal(r.batchSize, 4);
    assert.equal(r.busyNodes, 1);
    assert.equal(r.utilisationNow, 0.5);
    assert.equal(r.recommendedNodes, 2);
    assert.equal(r.targetUtilisationSource, 'config: capacity.target_utilisation');
    assert.equal(r.note, null);
  });

  void it('falls back to the circuit breaker, then to the observed in-flight per busy node', () => {
    const nodes = [node(3), node(0)];
    const breaker = source(poolConfig('a', { maxInFlight: 6, windowMs: 2000 }), nodes);
    const t1 = new PoolCapacityTracker(breaker, 0);
    drive(t1, breaker, 0, 2500, 25, () => void nodes[0]!.attempts++);
    assert.equal(t1.latest.callsPerNode, 6);
    assert.equal(t1.latest.callsPerNodeSource, CallsPerNodeSource.circuitBreaker);

    // No capacity section: the default 60 s window and 0.7 target.
    const observed = source(poolConfig('b'), nodes);
    const t2 = new PoolCapacityTracker(observed, 0);
    drive(t2, observed, 0, 61_000, 25, () => void nodes[0]!.attempts++);
    const r = t2.latest;
    assert.equal(r.callsPerNode, 3);
    assert.equal(r.callsPerNodeSource, CallsPerNodeSource.observed);
    assert.equal(r.windowMs, 60_000);
    assert.equal(r.spanMs, 60_000);
    // One node kept busy at its own concurrency: 1 busy node ÷ 0.7 (the default) → 2.
    assert.equal(r.busyNodes, 1);
    assert.equal(r.targetUtilisation, 0.7);
    assert.equal(r.targetUtilisationSource, 'default');
    assert.equal(r.recommendedNodes, 2);
  });

  void it('uses the observed items per call of a native micro-batched pool, one combined call per node', () => {
    const nodes = [node(1), node(1)];
    const stats = new MicroBatcherStats();
    const src = source(poolConfig('embed', { target: 0.8, windowMs: 2000 }), nodes, [
      { stats, mode: 'native', maxConcurrentPerNode: 8 },
    ]);
    const tracker = new PoolCapacityTracker(src, 0);
    let i = 0;
    drive(tracker, src, 0, 3000, 25, () => {
      // Each call carries 8 distinct items, plus 2 duplicates answered without a call.
      stats.items += 10;
      stats.deduplicated += 2;
      stats.upstreamCalls++;
      nodes[i++ % 2]!.attempts++;
    });
    const r = tracker.latest;
    assert.equal(r.itemsPerSecond, 320);
    assert.equal(r.upstreamCallsPerSecond, 40);
    assert.equal(r.itemsPerCall, 8);
    assert.equal(r.callsPerNode, 1);
    assert.equal(r.callsPerNodeSource, CallsPerNodeSource.native);
    assert.equal(r.batchSize, 8);
    assert.equal(r.timePerItemMs, 50);
    // 320 items/s × 0.05 s ÷ 8 items = 2 busy nodes; ÷ 0.8 = 2.5 → 3.
    assert.equal(r.busyNodes, 2);
    assert.equal(r.recommendedNodes, 3);
  });

  void it('sums the per-node concurrency of fanout routes', () => {
    const nodes = [node(4)];
    const a = new MicroBatcherStats();
    const b = new MicroBatcherStats();
    const src = source(poolConfig('fan', { windowMs: 2000 }), nodes, [
      { stats: a, mode: 'fanout', maxConcurrentPerNode: 4 },
      { stats: b, mode: 'fanout', maxConcurrentPerNode: 2 },
    ]);
    const tracker = new PoolCapacityTracker(src, 0);
    drive(tracker, src, 0, 2500, 25, () => {
      a.items++;
      a.upstreamCalls++;
      nodes[0]!.attempts++;
    });
    assert.equal(tracker.latest.callsPerNode, 6);
    assert.equal(tracker.latest.callsPerNodeSource, CallsPerNodeSource.fanout);
    assert.equal(tracker.latest.itemsPerCall, 1);
  });

  void it('counts as available only nodes in rotation and not drained', () => {
    const nodes = [node(0), { ...node(0), available: false }, { ...node(0), drained: true }];
    const src = source(poolConfig('mixed', { windowMs: 2000 }), nodes);
    const tracker = new PoolCapacityTracker(src, 0);
    drive(tracker, src, 0, 500, 25, () => undefined);
    assert.equal(tracker.latest.availableNodes, 1);
  });

  void it('recommends no nodes and says why when the window saw no calls', () => {
    const nodes = [node(0)];
    const src = source(poolConfig('idle', { windowMs: 2000 }), nodes);
    const tracker = new PoolCapacityTracker(src, 0);
    assert.equal(tracker.latest.note, 'window not started');
    drive(tracker, src, 0, 2500, 25, () => undefined);
    assert.equal(tracker.latest.recommendedNodes, 0);
    assert.equal(tracker.latest.itemsPerSecond, 0);
    assert.equal(tracker.latest.timePerItemMs, null);
    assert.equal(tracker.latest.note, 'no upstream calls in the window');
  });

  void it('forgets traffic older than the window', () => {
    const nodes = [node(2)];
    const src = source(poolConfig('gpu', { windowMs: 2000 }), nodes);
    const tracker = new PoolCapacityTracker(src, 0);
    let t = drive(tracker, src, 0, 2000, 25, () => void nodes[0]!.attempts++);
    assert.equal(tracker.latest.itemsPerSecond, 40);
    nodes[0]!.inFlight = 0;
    t = drive(tracker, src, t, t + 1000, 25, () => undefined);
    assert.equal(tracker.latest.itemsPerSecond, 20);
    drive(tracker, src, t, t + 1000, 25, () => undefined);
    assert.equal(tracker.latest.itemsPerSecond, 0);
    assert.equal(tracker.latest.recommendedNodes, 0);
  });

  void it('counts calls once across a reload that keeps some nodes and drops others', () => {
    const kept = node(1);
    const dropped = node(1);
    const config = poolConfig('gpu', { admission: 1, windowMs: 2000 });
    const before = source(config, [kept, dropped]);
    const tracker = new PoolCapacityTracker(before, 0);
    const t = drive(tracker, before, 0, 1000, 25, () => {
      kept.attempts++;
      dropped.attempts++;
    });
    const added = node(1);
    const after = source(config, [kept, added]);
    drive(tracker, after, t, 2000, 25, () => {
      kept.attempts++;
      added.attempts++;
    });
    // Two nodes, one call per 25 ms each, before and after: 80 calls/s over a window spanning both.
    assert.equal(tracker.latest.spanMs, 2000);
    assert.equal(tracker.latest.upstreamCallsPerSecond, 80);
    assert.equal(tracker.latest.nodes, 2);
  });

  void it('starts the figures over when the window length changes', () => {
    const nodes = [node(1)];
    const tracker = new PoolCapacityTracker(source(poolConfig('gpu', { windowMs: 2000 }), nodes), 0);
    const longer = source(poolConfig('gpu', { windowMs: 4000 }), nodes);
    const t = drive(tracker, longer, 0, 2000, 25, () => void nodes[0]!.attempts++);
    assert.equal(tracker.latest.windowMs, 4000);
    assert.ok(tracker.latest.spanMs <= 2000);
    drive(tracker, longer, t, 6000, 25, () => void nodes[0]!.attempts++);
    assert.equal(tracker.latest.spanMs, 4000);
  });

  void it('recommends one node, without a time, when every call ends between two samples', () => {
    const nodes = [node(0)];
    const src = source(poolConfig('fast', { windowMs: 2000 }), nodes);
    const tracker = new PoolCapacityTracker(src, 0);
    drive(tracker, src, 0, 2500, 25, () => void nodes[0]!.attempts++);
    assert.equal(tracker.latest.recommendedNodes, 1);
    assert.equal(tracker.latest.timePerItemMs, null);
    assert.match(tracker.latest.note ?? '', /shorter than the sampling interval/);
  });
});

void describe('CapacityWindow', () => {
  void it('keeps 21 snapshots and subtracts the oldest from the newest', () => {
    const w = new CapacityWindow(2000);
    const c = new CapacityCounters();
    const out = new CapacityCounters();
    assert.equal(w.stepMs, 100);
    w.push(c);
    assert.equal(w.delta(out), false);
    for (let i = 1; i <= 30; i++) {
      c.atMs = i * 100;
      c.calls = i * 4;
      w.push(c);
    }
    assert.equal(w.size, 21);
    assert.equal(w.delta(out), true);
    assert.equal(out.atMs, 2000);
    assert.equal(out.calls, 80);
  });
});

void describe('CapacityMonitor', () => {
  void it('keeps one tracker per pool of the current plan, in config order', () => {
    let now = 0;
    const a = source(poolConfig('a', { windowMs: 2000 }), [node(1)]);
    const b = source(poolConfig('b', { windowMs: 2000 }), [node(0)]);
    let pools: CapacityPoolSource[] = [a, b];
    const monitor = new CapacityMonitor({ pools: () => pools, clock: () => now });
    for (; now <= 2500; now += 25) {
      (a.nodes[0] as FakeNode).attempts++;
      monitor.tick();
    }
    assert.deepEqual(
      monitor.reports().map((r) => r.pool),
      ['a', 'b'],
    );
    assert.equal(monitor.reports()[0]!.upstreamCallsPerSecond, 40);
    pools = [b];
    monitor.tick();
    assert.deepEqual(
      monitor.reports().map((r) => r.pool),
      ['b'],
    );
    const view = capacityView(monitor.reports());
    assert.equal(view.pools[0]?.pool, 'b');
    assert.match(
      view.formula,
      /^nodes = ceil\(items_per_second × time_per_item ÷ batch_size ÷ target_utilisation\)$/,
    );
  });

  void it('samples on its own timer once started', async () => {
    const nodes = [node(1)];
    const src = source(poolConfig('gpu', { windowMs: 2000 }), nodes);
    const monitor = new CapacityMonitor({ pools: () => [src] });
    monitor.start();
    try {
      await waitFor(() => (monitor.reports()[0]?.sequence ?? 0) >= 3, 5000, 'three recomputations');
    } finally {
      monitor.close();
    }
  });
});
