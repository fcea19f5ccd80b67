/**
 * Versions, canaries and fallbacks through a real Sluice: weighted splits, pinning by header,
 * sticky sessions that survive a weight change, fallback pools, and shadow traffic whose answers
 * never reach the client.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { DEFAULT_POINTS_PER_WEIGHT, HashRing } from '../../proxy/balance/hash-ring.js';

const chat = (headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
});

function config(fleet: SimFleet, route: string, pools = ''): string {
  return `${LOOPBACK_HEAD}pools:
  - name: stable
    nodes:
      - url: ${fleet.urls[0]}
  - name: canary
    nodes:
      - url: ${fleet.urls[1]}
  - name: shadow
    nodes:
      - url: ${fleet.urls[2]}
${pools}
routes:
  - name: chat
    match: {}
    route_header: true
${route}
`;
}

async function poolOf(t: TestSluice, headers: Record<string, string> = {}): Promise<string> {
  const r = await fetch(`${t.url}/v1/chat/completions`, chat(headers));
  assert.equal(r.status, 200);
  await r.arrayBuffer();
  return /pool=([\w-]+)/.exec(r.headers.get('x-sluice-route') ?? '')?.[1] ?? '?';
}

describe('traffic split', () => {
  let fleet: SimFleet;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 3, port: 0, profile: 'fast' });
  });

  afterEach(async () => {
    await t?.close();
    t = null;
    for (const n of fleet.nodes) n.setFaults({ error_rate: 0, unhealthy: false });
  });

  after(async () => {
    await fleet?.close();
  });

  it('splits traffic by weight', async () => {
    t = await startTestSluice(
      config(fleet, '    split: [{ pool: stable, weight: 80 }, { pool: canary, weight: 20 }]'),
    );
    const counts: Record<string, number> = {};
    for (let i = 0; i < 500; i++) {
      const p = await poolOf(t);
      counts[p] = (counts[p] ?? 0) + 1;
    }
    assert.ok((counts['canary'] ?? 0) > 60 && (counts['canary'] ?? 0) < 140, JSON.stringify(counts));
    assert.equal((counts['stable'] ?? 0) + (counts['canary'] ?? 0), 500);
  });

  it('pins a request to the pool its header names', async () => {
    t = await startTestSluice(
      config(
        fleet,
        '    split: [{ pool: stable, weight: 100 }, { pool: canary, weight: 0 }]\n    pin_header: x-sluice-pool',
      ),
    );
    assert.equal(await poolOf(t, { 'x-sluice-pool': 'canary' }), 'canary');
    assert.equal(await poolOf(t), 'stable');
    assert.equal(await poolOf(t, { 'x-sluice-pool': 'nonexistent' }), 'stable');
  });

  it('keeps each session on the pool it started on when the weights change', async () => {
    const split = (a: number, b: number): string =>
      config(
        fleet,
        `    split: [{ pool: stable, weight: ${a} }, { pool: canary, weight: ${b} }]\n    sticky_header: x-session-id`,
      );
    t = await startTestSluice(split(50, 50));
    const first = new Map<string, string>();
    for (let i = 0; i < 40; i++) first.set(`s${i}`, await poolOf(t, { 'x-session-id': `s${i}` }));
    assert.ok(new Set(first.values()).size === 2, 'sessions spread over both pools');
    await writeFile(t.configPath, split(1, 99));
    assert.equal((await t.sluice.reload()).result, 'applied');
    for (const [session, pool] of first)
      assert.equal(await poolOf(t, { 'x-session-id': session }), pool, session);
    let canary = 0;
    for (let i = 0; i < 40; i++) if ((await poolOf(t, { 'x-session-id': `new${i}` })) === 'canary') canary++;
    assert.ok(canary >= 35, `new sessions follow the new weights (${canary}/40 on canary)`);
  });

  it('falls back to the next pool when the pool has no available node', async () => {
    const checked = config(fleet, '    pool: stable\n    fallback: [canary]').replace(
      `      - url: ${fleet.urls[0]!}\n`,
      `      - url: ${fleet.urls[0]!}\n    health: { active: { interval_ms: 20, unhealthy_threshold: 1, healthy_threshold: 1 } }\n`,
    );
    assert.ok(checked.includes('active:'));
    t = await startTestSluice(checked);
    assert.equal(await poolOf(t), 'stable');
    fleet.nodes[0]!.setFaults({ unhealthy: true });
    const node = [...t.sluice.registry.all()].find((n) => n.id === fleet.urls[0]);
    await waitFor(() => node?.available === false, 3000, 'stable node down');
    assert.equal(await poolOf(t), 'canary');
    const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_pool_fallback_total\{pool="canary"\} 1/);
  });

  it('places a retry that falls back to another pool by that pool’s own affinity key', async () => {
    // The first pool hashes the request's x-first key and its only node fails; the retry falls back
    // to a pool keyed on x-second, whose ring must place it by x-second's hash, not x-first's.
    fleet.nodes[0]!.setFaults({ error_rate: 1, error_status: 500 });
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: first
    nodes:
      - url: ${fleet.urls[0]}
    balance: { kind: consistent-hash, affinity: { source: header, name: x-first } }
    retry_budget: { percent: 100, min_per_second: 100 }
  - name: second
    nodes:
      - url: ${fleet.urls[1]}
      - url: ${fleet.urls[2]}
    balance: { kind: consistent-hash, affinity: { source: header, name: x-second } }
routes:
  - name: chat
    match: {}
    route_header: true
    pool: first
    fallback: [second]
    retries: { max: 1, on: [5xx], base_backoff_ms: 1, max_backoff_ms: 1 }
`);
    const ring = new HashRing([fleet.urls[1]!, fleet.urls[2]!], [1, 1], DEFAULT_POINTS_PER_WEIGHT);
    const homes = new Set<string>();
    for (let k = 0; k < 16; k++) {
      const key = `conversation-${k}`;
      const r = await fetch(`${t.url}/v1/chat/completions`, chat({ 'x-first': 'one key', 'x-second': key }));
      assert.equal(r.status, 200);
      await r.arrayBuffer();
      const route = r.headers.get('x-sluice-route') ?? '';
      const home = [fleet.urls[1]!, fleet.urls[2]!][ring.owners[ring.locate(key)]!]!;
      assert.match(route, /pool=second/);
      assert.ok(route.includes(`node=${home};`), `${key}: ${route}`);
      homes.add(home);
    }
    assert.equal(homes.size, 2, 'the keys have homes on both nodes');
  });

  it('mirrors requests to a shadow pool without letting its answers reach the client', async () => {
    fleet.nodes[2]!.setFaults({ error_rate: 1, error_status: 500 });
    t = await startTestSluice(config(fleet, '    pool: stable\n    mirror: { pool: shadow, percent: 100 }'));
    const before = fleet.nodes[2]!.stats().injectedErrors;
    for (let i = 0; i < 10; i++) assert.equal(await poolOf(t), 'stable');
    await waitFor(() => fleet.nodes[2]!.stats().injectedErrors - before === 10, 3000, 'ten shadow copies');
    await waitFor(
      async () => {
        const m = await (await fetch(`${t!.adminUrl}/metrics`)).text();
        return /sluice_mirror_requests_total\{route="chat",code="500"\} 10/.test(m);
      },
      3000,
      'mirror metrics',
    );
  });
});
