/**
 * Active health checks against real simulated GPU nodes over HTTP: a crashed node goes out after
 * exactly `unhealthyThreshold` failed probes and comes back after exactly `healthyThreshold` good
 * ones, in slow start; a 503 and a probe timeout count as failures; a neighbour is unaffected.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { HealthEventKind, type PoolHealthOptions } from '../../proxy/health/health-options.js';
import { PoolHealth } from '../../proxy/health/pool-health.js';
import type { NodeHealthSnapshot } from '../../proxy/health/health-snapshot.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { closeNodes, EventLog, liveNode, waitFor } from './health-test-kit.js';

let fleet: SimFleet;
const healths: PoolHealth[] = [];

function start(nodes: UpstreamNode[], options: PoolHealthOptions): PoolHealth {
  const h = new PoolHealth('checked', options);
  healths.push(h);
  h.update(nodes, options);
  return h;
}

function snap(h: PoolHealth, node: UpstreamNode): NodeHealthSnapshot {
  const s = h.snapshot().nodes.find((n) => n.id === node.id);
  assert.ok(s);
  return s;
}

before(async () => {
  fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
});

afterEach(async () => {
  for (const h of healths.splice(0)) h.close();
  for (const n of fleet.nodes) n.setFaults({ crash: false, unhealthy: false });
  await closeNodes();
});

after(async () => {
  await fleet?.close();
});

describe('active health checks', () => {
  it('marks a crashed node unavailable after exactly unhealthyThreshold failed probes and brings it back after exactly healthyThreshold good ones', async () => {
    const [a, b] = [liveNode(fleet.urls[0]!), liveNode(fleet.urls[1]!)];
    const log = new EventLog();
    // Each transition is captured with the checker's counts at that moment.
    const atTransition: { kind: string; snap: NodeHealthSnapshot; available: boolean }[] = [];
    const h: PoolHealth = start([a, b], {
      activeCheck: { intervalMs: 20, timeoutMs: 500, unhealthyThreshold: 3, healthyThreshold: 2 },
      slowStartMs: 200,
      onEvent: (e) => {
        log.onEvent(e);
        if (e.node === a.id && (e.kind === HealthEventKind.checkDown || e.kind === HealthEventKind.checkUp)) {
          atTransition.push({ kind: e.kind, snap: snap(h, a), available: a.available });
        }
      },
    });
    await waitFor(() => (snap(h, a).activeCheck?.probes ?? 0) >= 2, 'two probes of a healthy node');
    assert.equal(snap(h, a).activeCheck?.state, 'up');
    assert.equal(snap(h, a).activeCheck?.failedProbes, 0);

    fleet.nodes[0]!.setFaults({ crash: true });
    // Sampled while waiting: never out with fewer failed probes than the threshold.
    const early: number[] = [];
    await waitFor(() => {
      const failed = snap(h, a).activeCheck?.failedProbes ?? 0;
      if (!a.available && failed < 3) early.push(failed);
      return !a.available;
    }, 'the crashed node to go out');
    assert.deepEqual(early, []);
    const down = atTransition[0]!;
    assert.equal(down.kind, HealthEventKind.checkDown);
    assert.equal(down.available, false, 'out as the transition is reported');
    assert.equal(down.snap.activeCheck?.consecutiveFailures, 3);
    assert.equal(down.snap.activeCheck?.failedProbes, 3, 'not after 2 failed probes, not after 4');
    assert.equal(b.available, true, 'the healthy neighbour stays in');
    assert.ok(snap(h, a).activeCheck?.lastError, 'the probe error is kept');

    fleet.nodes[0]!.setFaults({ crash: false });
    await waitFor(() => a.available, 'the recovered node to come back');
    const up = atTransition[1]!;
    assert.equal(up.kind, HealthEventKind.checkUp);
    assert.equal(up.available, true, 'back as the transition is reported');
    assert.equal(up.snap.activeCheck?.consecutiveSuccesses, 2);
    assert.equal(atTransition.length, 2);

    assert.ok(a.weightFactor < 1, `a returning node starts in slow start, got ${a.weightFactor}`);
    assert.equal(log.of(HealthEventKind.returned).length, 1);
    await waitFor(() => a.weightFactor === 1, 'the slow-start ramp to finish');
    assert.equal(b.weightFactor, 1);
  });

  it('counts a 503 from the health path as a failed probe', async () => {
    const a = liveNode(fleet.urls[0]!);
    const b = liveNode(fleet.urls[1]!);
    const h = start([a, b], { activeCheck: { intervalMs: 20, unhealthyThreshold: 2 } });
    fleet.nodes[0]!.setFaults({ unhealthy: true });
    await waitFor(() => !a.available, 'the unhealthy node to go out');
    assert.equal(snap(h, a).activeCheck?.lastError, 'HTTP 503');
    assert.equal(b.available, true);
  });

  it('fails a probe that gets no answer within timeoutMs', async () => {
    const held: Socket[] = [];
    const silent: Server = createServer((s) => {
      held.push(s);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const port = (silent.address() as AddressInfo).port;
      const a = liveNode(`http://127.0.0.1:${port}`);
      const b = liveNode(fleet.urls[1]!);
      const h = start([a, b], { activeCheck: { intervalMs: 20, timeoutMs: 50, unhealthyThreshold: 1 } });
      await waitFor(() => !a.available, 'the silent node to go out');
      assert.match(snap(h, a).activeCheck?.lastError ?? '', /timed out after 50 ms/);
    } finally {
      for (const s of held) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('leaves nodes available and probes nothing when activeCheck is absent', () => {
    const a = liveNode(fleet.urls[0]!);
    const h = start([a], {});
    assert.equal(snap(h, a).activeCheck, null);
    assert.equal(a.available, true);
  });
});
