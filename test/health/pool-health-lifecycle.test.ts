/**
 * `PoolHealth` across reloads and shutdown: `update` keeps the state of nodes that stay, forgets
 * and stops probing nodes that left, slow-starts nodes added later, and applies changed options;
 * `close` stops every probe, and a running `PoolHealth` never keeps the process alive.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { HealthEventKind, type PoolHealthOptions } from '../../proxy/health/health-options.js';
import { PoolHealth } from '../../proxy/health/pool-health.js';
import { runningProbeLoops } from '../../proxy/health/probe-loop.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import {
  closeNodes,
  EventLog,
  idleNodes,
  liveNode,
  ManualClock,
  startCountingServer,
  waitFor,
  type CountingServer,
} from './health-test-kit.js';

const healths: PoolHealth[] = [];
const servers: CountingServer[] = [];

function pool(options: PoolHealthOptions): PoolHealth {
  const h = new PoolHealth('reloaded', options);
  healths.push(h);
  return h;
}

async function server(status = 200): Promise<CountingServer> {
  const s = await startCountingServer((_req, res) => {
    res.statusCode = status;
    res.end();
  });
  servers.push(s);
  return s;
}

afterEach(async () => {
  for (const h of healths.splice(0)) h.close();
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await closeNodes();
});

describe('pool health across reloads', () => {
  it('keeps failure counts, ejections and ejection counts of nodes that stay', () => {
    const clock = new ManualClock();
    const [a, b, c] = idleNodes(3) as [UpstreamNode, UpstreamNode, UpstreamNode];
    const options: PoolHealthOptions = {
      outlier: { consecutiveFailures: 3, baseEjectionMs: 1000, maxEjectionPercent: 100 },
      now: clock.now,
    };
    const h = pool(options);
    h.update([a, b, c], options);
    for (let i = 0; i < 3; i++) h.recordFailure(a, 'HTTP 500');
    for (let i = 0; i < 2; i++) h.recordFailure(b, 'HTTP 500');
    h.update([a, b, c], { ...options });
    assert.equal(a.available, false, 'the ejection survives the reload');
    const snap = h.snapshot();
    assert.equal(snap.ejected, 1);
    assert.equal(snap.nodes.find((n) => n.id === a.id)?.ejectedForMs, 1000);
    assert.equal(snap.nodes.find((n) => n.id === b.id)?.consecutiveFailures, 2);
    h.recordFailure(b, 'HTTP 500');
    assert.equal(b.available, false, 'the third failure counts on top of the two before the reload');
  });

  it('carries the verdict of a node whose object a reload replaced (same URL, new connection settings)', () => {
    const clock = new ManualClock();
    const [a, b, c] = idleNodes(3) as [UpstreamNode, UpstreamNode, UpstreamNode];
    const options: PoolHealthOptions = {
      outlier: { consecutiveFailures: 2, baseEjectionMs: 1000, maxEjectionPercent: 34 },
      now: clock.now,
    };
    const h = pool(options);
    h.update([a, b, c], options);
    for (let i = 0; i < 2; i++) h.recordFailure(a, 'HTTP 500');
    h.recordFailure(b, 'HTTP 500');
    assert.equal(a.available, false);
    // The reload's new objects for a and b (connect_ms changed), c unchanged.
    const a2 = new UpstreamNode(a.id, { connections: 2, connectTimeoutMs: 900 });
    const b2 = new UpstreamNode(b.id, { connections: 2, connectTimeoutMs: 900 });
    try {
      h.update([a2, b2, c], options);
      assert.equal(a2.available, false, 'the ejection survives the new object');
      assert.equal(h.snapshot().ejected, 1);
      assert.equal(h.snapshot().nodes.find((n) => n.id === b.id)?.consecutiveFailures, 1);
      // The cap still counts the carried ejection: a second one would exceed 34 % of 3.
      h.recordFailure(b2, 'HTTP 500');
      assert.equal(b2.available, true, 'the cap counted the carried ejection');
      clock.advance(1001);
      h.refresh();
      assert.equal(a2.available, true, 'the carried ejection ends on time');
    } finally {
      void a2.close();
      void b2.close();
    }
  });

  it('forgets a node that left: its fields return to the defaults and its ejection frees the cap', () => {
    const clock = new ManualClock();
    const [a, b, c, d] = idleNodes(4) as [UpstreamNode, UpstreamNode, UpstreamNode, UpstreamNode];
    const options: PoolHealthOptions = {
      outlier: { consecutiveFailures: 1, maxEjectionPercent: 34 },
      now: clock.now,
    };
    const h = pool(options);
    h.update([a, b, c], options);
    h.recordFailure(a, 'ECONNRESET');
    h.recordFailure(b, 'ECONNRESET');
    assert.equal(a.available, false);
    assert.equal(b.available, true, '2 of 3 would exceed 34%');
    h.update([b, c, d], options);
    assert.equal(a.available, true);
    assert.equal(a.weightFactor, 1);
    assert.equal(h.snapshot().nodes.length, 3);
    assert.equal(h.snapshot().ejected, 0);
    h.recordFailure(a, 'ECONNRESET');
    assert.equal(
      h.snapshot().nodes.some((n) => n.id === a.id),
      false,
      'a forgotten node is not counted',
    );
    h.recordFailure(b, 'ECONNRESET');
    assert.equal(b.available, false, 'the cap has room again');
  });

  it('slow-starts a node added by a reload but not the nodes of the first start', () => {
    const clock = new ManualClock();
    const [a, b] = idleNodes(2) as [UpstreamNode, UpstreamNode];
    const options: PoolHealthOptions = { slowStartMs: 1000, minWeightFactor: 0.25, now: clock.now };
    const h = pool(options);
    h.update([a], options);
    assert.equal(a.weightFactor, 1);
    h.update([a, b], options);
    assert.equal(b.weightFactor, 0.25);
    assert.equal(a.weightFactor, 1);
    clock.advance(1000);
    h.refresh();
    assert.equal(b.weightFactor, 1);
  });

  it('stops probing a node that left while probing the nodes that stay', async () => {
    const [kept, removed] = [await server(), await server()];
    const a = liveNode(kept.url);
    const b = liveNode(removed.url);
    const options: PoolHealthOptions = { activeCheck: { intervalMs: 10 } };
    const h = pool(options);
    h.update([a, b], options);
    await waitFor(() => removed.count('/health') >= 2, 'probes of the node about to leave');
    const loops = runningProbeLoops();
    h.update([a], options);
    assert.equal(runningProbeLoops(), loops - 1, "the removed node's checker stopped");
    const removedAtReload = removed.count('/health');
    const keptAtReload = kept.count('/health');
    await waitFor(() => kept.count('/health') >= keptAtReload + 10, 'ten more probes of the kept node');
    // A probe in flight at the reload may still land; nothing after it.
    assert.ok(
      removed.count('/health') <= removedAtReload + 1,
      `got ${removed.count('/health') - removedAtReload}`,
    );
    assert.equal(h.snapshot().nodes.length, 1);
  });

  it('brings back a node that failed its checks when a reload turns active checks off', async () => {
    const down = await server(503);
    const up = await server();
    const a = liveNode(down.url);
    const b = liveNode(up.url);
    const log = new EventLog();
    const checked: PoolHealthOptions = {
      activeCheck: { intervalMs: 10, unhealthyThreshold: 1 },
      slowStartMs: 0,
      onEvent: log.onEvent,
    };
    const h = pool(checked);
    h.update([a, b], checked);
    await waitFor(() => !a.available, 'the failing node to go out');
    h.update([a, b], { slowStartMs: 0, onEvent: log.onEvent });
    assert.equal(a.available, true);
    assert.equal(h.snapshot().nodes[0]?.activeCheck, null);
    assert.equal(log.of(HealthEventKind.returned).length, 1);
  });

  it('keeps a node that failed its checks out across a reload that replaces its object, until its checks pass', async () => {
    let status = 503;
    const s = await startCountingServer((_req, res) => {
      res.statusCode = status;
      res.end();
    });
    servers.push(s);
    const a = liveNode(s.url);
    const checked: PoolHealthOptions = {
      activeCheck: { intervalMs: 10, unhealthyThreshold: 1, healthyThreshold: 2 },
      slowStartMs: 0,
    };
    const h = pool(checked);
    h.update([a], checked);
    await waitFor(() => !a.available, 'the failing node to go out');
    // The reload's new object for the node (its connection settings changed).
    const a2 = liveNode(s.url);
    h.update([a2], checked);
    assert.equal(a2.available, false, 'the verdict carried over');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(a2.available, false, 'still failing: still out');
    status = 200;
    await waitFor(() => a2.available, 'the node to come back once its probes pass');
    // A reload that replaces it again and turns checks off brings it back at once (checks on it
    // are gone), even before a checker of the new object existed.
    status = 503;
    await waitFor(() => !a2.available, 'out again');
    const a3 = liveNode(s.url);
    h.update([a3], { slowStartMs: 0 });
    assert.equal(a3.available, true);
  });

  it('rejects options out of range and changes nothing', () => {
    const [a] = idleNodes(1) as [UpstreamNode];
    const h = pool({});
    h.update([a], {});
    assert.throws(
      () => h.update([], { activeCheck: { unhealthyThreshold: 0 } }),
      /activeCheck\.unhealthyThreshold/,
    );
    assert.throws(() => new PoolHealth('bad', { minWeightFactor: 0 }), /minWeightFactor/);
    assert.throws(
      () => new PoolHealth('bad', { outlier: { baseEjectionMs: 1000, maxEjectionMs: 10 } }),
      /maxEjectionMs/,
    );
    assert.equal(h.snapshot().nodes.length, 1);
  });
});

describe('pool health shutdown', () => {
  it('stops every probe and scrape on close', async () => {
    const [closed, metronome] = [await server(), await server()];
    const a = liveNode(closed.url);
    const m = liveNode(metronome.url);
    const options: PoolHealthOptions = { activeCheck: { intervalMs: 10 }, scrape: { intervalMs: 10 } };
    const loopsBefore = runningProbeLoops();
    const h = pool(options);
    h.update([a], options);
    assert.equal(runningProbeLoops(), loopsBefore + 2, 'one checker and one scraper');
    const other = pool(options);
    other.update([m], options);
    await waitFor(() => closed.count('/health') >= 2 && closed.count('/metrics') >= 2, 'probes and scrapes');
    h.close();
    assert.equal(runningProbeLoops(), loopsBefore + 2, 'only the other pool still probes');
    const probes = closed.count('/health');
    const scrapes = closed.count('/metrics');
    const ticks = metronome.count('/health');
    await waitFor(() => metronome.count('/health') >= ticks + 10, 'ten probes of the other pool');
    assert.ok(closed.count('/health') <= probes + 1, 'at most the probe in flight at close');
    assert.ok(closed.count('/metrics') <= scrapes + 1, 'at most the scrape in flight at close');
    h.recordFailure(a, 'ignored after close');
    assert.equal(h.snapshot().nodes.length, 0);
    assert.throws(() => h.update([a], options), /closed/);
  });

  it('never keeps the process alive, even while checking, scraping, ejecting and ramping', async () => {
    const target = await server();
    const child = spawn(
      process.execPath,
      [fileURLToPath(new URL('./fixtures/running-health.js', import.meta.url)), target.url],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const timeout = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 5000).unref());
    const result = await Promise.race([exited, timeout]);
    if (result === 'hung') child.kill('SIGKILL');
    assert.equal(result, 0, `child output: ${out}`);
    assert.match(out, /running: probes \d+, scrapes \d+, ejected 1, ramping true/);
    assert.ok(target.count('/health') >= 2);
  });
});
