/**
 * Failure handling against real simulated nodes: retries on another node (never after the first
 * byte), the retry budget under a total outage, outlier ejection within its threshold, active
 * checks, the circuit breaker's fast 503, hedged requests, and the x-sluice-route report.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, findNode, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const chat = (extra: Record<string, string> = {}, body: Record<string, unknown> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...extra },
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...body }),
});

function config(nodes: readonly string[], pool = '', route = ''): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
${pool}
routes:
  - name: all
    match: {}
    pool: gpu
    route_header: true
${route}
`;
}

async function send(
  t: TestSluice,
  init = chat(),
): Promise<{ status: number; route: string | null; text: string }> {
  const r = await fetch(`${t.url}/v1/chat/completions`, init);
  return { status: r.status, route: r.headers.get('x-sluice-route'), text: await r.text() };
}

describe('failure handling', () => {
  let fleet: SimFleet;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 3, port: 0, profile: 'fast' });
  });

  afterEach(async () => {
    await t?.close();
    t = null;
    for (const n of fleet.nodes)
      n.setFaults({ error_rate: 0, stall_ms: 0, unhealthy: false, crash: false, drop_rate: 0 });
  });

  after(async () => {
    await fleet?.close();
  });

  it('retries a stream whose node sent its head and broke before the first event (nothing reached the client)', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(config([a, b], '', '    retries: { max: 1 }'));
    fleet.nodes[0]!.setFaults({ drop_rate: 1, drop_after_chunks: 0 });
    const results = [];
    for (let i = 0; i < 4; i++) results.push(await send(t, chat({}, { stream: true })));
    for (const r of results) {
      assert.equal(r.status, 200, r.text);
      assert.match(r.text, /data: \[DONE\]/);
      assert.match(r.route ?? '', new RegExp(`node=${b}`));
    }
    assert.ok(
      results.some((r) => r.route?.includes('attempt=2')),
      `no request was retried: ${results.map((r) => r.route).join(' | ')}`,
    );
  });

  it('retries a 429 when retries.on lists it as a number, as YAML reads 429 unquoted', async () => {
    const [a, b] = fleet.urls as [string, string];
    fleet.nodes[0]!.setFaults({ error_rate: 1, error_status: 429 });
    t = await startTestSluice(
      config(
        [a, b],
        '    retry_budget: { percent: 100, min_per_second: 5 }',
        '    retries: { max: 1, on: [429, 5xx] }',
      ),
    );
    for (let i = 0; i < 4; i++) {
      const r = await send(t);
      assert.equal(r.status, 200, r.text);
      assert.match(r.route ?? '', new RegExp(`node=${b}`));
    }
  });

  it('retries a 503 on another node and answers with that node', async () => {
    const [a, b] = fleet.urls as [string, string];
    fleet.nodes[0]!.setFaults({ error_rate: 1, error_status: 503 });
    t = await startTestSluice(
      config(
        [a, b],
        '    health: { outlier: { consecutive_failures: 0 } }\n    retry_budget: { percent: 100, min_per_second: 5 }',
      ),
    );
    const results = await Promise.all(Array.from({ length: 20 }, () => send(t!)));
    assert.deepEqual(
      results.map((r) => r.status),
      Array(20).fill(200),
    );
    const retried = results.filter((r) => r.route?.includes('attempt=2'));
    assert.ok(retried.length >= 5, `expected about half the requests to need a retry, got ${retried.length}`);
    assert.ok(retried.every((r) => r.route!.includes(`node=${b}`)));
  });

  it('passes a 503 through when no other node could take a retry', async () => {
    fleet.nodes[0]!.setFaults({ error_rate: 1, error_status: 503 });
    t = await startTestSluice(config([fleet.urls[0]!]));
    const r = await send(t);
    assert.equal(r.status, 503);
    assert.match(r.text, /"error"/);
  });

  it('never retries once response bytes went to the client', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(config([a, b]));
    const before = fleet.nodes[0]!.stats().injectedDrops + fleet.nodes[1]!.stats().injectedDrops;
    const r = await send(t, chat({ 'x-sim-drop-after': '2' }, { stream: true }));
    assert.equal(r.status, 200);
    assert.match(r.text, /data: \{"error"/);
    const after = fleet.nodes[0]!.stats().injectedDrops + fleet.nodes[1]!.stats().injectedDrops;
    assert.equal(after - before, 1, 'exactly one attempt was made');
  });

  it('keeps upstream attempts within the retry budget when every node fails, after healthy traffic', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(
      config(
        [a, b],
        '    health: { outlier: { consecutive_failures: 0 } }\n    retry_budget: { percent: 20, min_per_second: 5 }',
        '    retries: { max: 3, base_backoff_ms: 1, max_backoff_ms: 2 }',
      ),
    );
    // The healthy requests before the outage must not fund a burst of retries at its start.
    let healthy = 0;
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        while (healthy < 300) {
          healthy++;
          assert.equal((await send(t!)).status, 200);
        }
      }),
    );
    for (const n of fleet.nodes.slice(0, 2)) n.setFaults({ error_rate: 1, error_status: 503 });
    const errorsBefore = fleet.nodes[0]!.stats().injectedErrors + fleet.nodes[1]!.stats().injectedErrors;
    const started = performance.now();
    const requests = 300;
    let sent = 0;
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        while (sent < requests) {
          sent++;
          const r = await send(t!);
          assert.equal(r.status, 503);
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const attempts =
      fleet.nodes[0]!.stats().injectedErrors + fleet.nodes[1]!.stats().injectedErrors - errorsBefore;
    const bound = 1.2 * requests + 5 + 5 * seconds;
    assert.ok(
      attempts <= bound,
      `${attempts} upstream attempts for ${requests} requests (bound ${bound.toFixed(0)})`,
    );
    assert.ok(attempts > requests, 'some retries were made');
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_pool_retry_budget_refused_total\{pool="gpu"\} [1-9]/);
  });

  it('ejects a failing node after exactly its failure threshold and keeps success at 100% with retries', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(
      config([a, b], '    health: { outlier: { consecutive_failures: 3, base_ejection_ms: 60000 } }'),
    );
    for (let i = 0; i < 10; i++) assert.equal((await send(t)).status, 200);
    fleet.nodes[0]!.setFaults({ error_rate: 1, error_status: 500 });
    const before = fleet.nodes[0]!.stats().injectedErrors;
    let ok = 0;
    for (let i = 0; i < 50; i++) if ((await send(t)).status === 200) ok++;
    assert.equal(ok, 50);
    assert.equal(
      fleet.nodes[0]!.stats().injectedErrors - before,
      3,
      'the node saw exactly threshold failures',
    );
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.ok(metrics.includes(`sluice_upstream_available{pool="gpu",node="${a}"} 0`));
  });

  it('takes a node whose health check fails out of rotation, and brings it back', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(
      config(
        [a, b],
        '    health:\n      active: { interval_ms: 20, timeout_ms: 200, unhealthy_threshold: 2, healthy_threshold: 1 }\n      slow_start_ms: 0',
      ),
    );
    const node = [...t.sluice.registry.all()].find((n) => n.id === a)!;
    fleet.nodes[0]!.setFaults({ unhealthy: true });
    await waitFor(() => !node.available, 3000, 'node marked unavailable');
    const before = fleet.nodes[0]!.stats().served;
    for (let i = 0; i < 10; i++) assert.equal((await send(t)).status, 200);
    assert.equal(fleet.nodes[0]!.stats().served, before, 'no traffic to the unhealthy node');
    fleet.nodes[0]!.setFaults({ unhealthy: false });
    await waitFor(() => node.available, 3000, 'node back');
  });

  it('answers 503 with Retry-After at once when every node is at its in-flight limit', async () => {
    t = await startTestSluice(config([fleet.urls[0]!], '    max_in_flight_per_node: 1'));
    const slow = await fetch(
      `${t.url}/v1/chat/completions`,
      chat({ 'x-sim-chunk-delay-ms': '50' }, { stream: true, max_tokens: 10 }),
    );
    assert.equal(slow.status, 200);
    const started = performance.now();
    const r = await fetch(`${t.url}/v1/chat/completions`, chat());
    const ms = performance.now() - started;
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'no_healthy_upstream');
    assert.ok(ms < 100, `took ${ms.toFixed(1)} ms`);
    await slow.text();
  });

  it('hedges a slow attempt to another node and the faster answer wins', async () => {
    const [a, b] = fleet.urls as [string, string];
    t = await startTestSluice(
      config([a, b], '    hedge: { min_samples: 5, min_delay_ms: 30, budget_percent: 100, percentile: 50 }'),
    );
    for (let i = 0; i < 20; i++) assert.equal((await send(t)).status, 200);
    fleet.nodes[0]!.setFaults({ stall_ms: 2000 });
    const started = performance.now();
    const results = await Promise.all(Array.from({ length: 4 }, () => send(t!)));
    const ms = performance.now() - started;
    assert.deepEqual(
      results.map((r) => r.status),
      [200, 200, 200, 200],
    );
    assert.ok(ms < 1000, `hedged requests took ${ms.toFixed(0)} ms; the stall is 2000`);
    assert.ok(results.some((r) => r.route?.includes('hedge')));
    // The losing attempts on the stalled node are cancelled, not left to run out the 2 s stall.
    await waitFor(() => findNode(t!, a)!.inFlight === 0, 1000, 'the losing attempts to be cancelled');
    assert.ok(performance.now() - started < 1500, 'losers cancelled before the stall ended');
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_pool_hedge_wins_total\{pool="gpu"\} [1-9]/);
  });

  it('reports policy, pool, node, attempt and affinity in x-sluice-route', async () => {
    t = await startTestSluice(config([fleet.urls[2]!]));
    const r = await send(t);
    assert.equal(r.route, `pool=gpu; policy=round-robin; node=${fleet.urls[2]!}; attempt=1; affinity=none`);
  });

  it("reports cache-aware's estimates in x-sluice-route: expected wait, load and stall terms, cached prefix", async () => {
    t = await startTestSluice(
      config(
        fleet.urls,
        '    balance: { kind: cache-aware, stall_weight: 0.5, affinity: { source: header, name: x-session-id } }',
      ),
    );
    const history = 'a conversation that every turn repeats '.repeat(40);
    const turn = (n: number): RequestInit =>
      chat(
        { 'x-session-id': 'session-1' },
        {
          messages: [
            { role: 'user', content: history },
            { role: 'assistant', content: 'noted' },
            { role: 'user', content: `question ${n}` },
          ],
        },
      );
    const routes: string[] = [];
    for (let n = 0; n < 4; n++) {
      const r = await send(t, turn(n));
      assert.equal(r.status, 200, r.text);
      routes.push(r.route ?? '');
    }
    // From the second turn the node has samples (expected_ttft_ms) and holds the shared history.
    for (const route of routes.slice(1)) {
      assert.match(
        route,
        /; policy=cache-aware; .*; affinity=hit; expected_ttft_ms=\d+; queued_ms=\d+; stall_ms=\d+; cached_tokens=[1-9]\d*$/,
      );
    }
  });
});
