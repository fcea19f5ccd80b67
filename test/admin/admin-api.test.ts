/**
 * The admin listener: liveness, readiness (503 while draining), Prometheus metrics that count what
 * happened, the active config with its version (secrets masked), node counters, and JSON 404s.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

describe('admin API', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig([fleet.urls[0]!]));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('answers /healthz and /readyz with 200 while serving', async () => {
    assert.equal((await fetch(`${t.adminUrl}/healthz`)).status, 200);
    assert.equal((await fetch(`${t.adminUrl}/readyz`)).status, 200);
  });

  it('counts requests per route and status in /metrics', async () => {
    for (let i = 0; i < 3; i++) await (await fetch(`${t.url}/debug/echo`)).arrayBuffer();
    const failed = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-status': '503' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    });
    assert.equal(failed.status, 503);
    await failed.arrayBuffer();
    const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
    assert.match(text, /^sluice_requests_total\{route="all",code="200"\} 3$/m);
    assert.match(text, /^sluice_requests_total\{route="all",code="503"\} 1$/m);
    assert.match(text, /^sluice_request_duration_seconds_count\{route="all"\} 4$/m);
    assert.match(text, /^sluice_request_duration_seconds\{route="all",quantile="0.99"\} \d/m);
    assert.match(
      text,
      new RegExp(`^sluice_upstream_attempts_total\\{pool="gpu",node="${fleet.urls[0]!}"\\} 4$`, 'm'),
    );
    assert.match(text, /^sluice_config_version 1$/m);
  });

  it('returns the active config with defaults applied and its version', async () => {
    const body = (await (await fetch(`${t.adminUrl}/admin/config`)).json()) as {
      version: number;
      digest: string;
      config: { pools: { name: string; timeouts: { connect_ms: number } }[] };
    };
    assert.equal(body.version, 1);
    assert.match(body.digest, /^[0-9a-f]{64}$/);
    assert.equal(body.config.pools[0]?.name, 'gpu');
    assert.equal(body.config.pools[0]?.timeouts.connect_ms, 2000);
  });

  it('lists nodes with live counters', async () => {
    const body = (await (await fetch(`${t.adminUrl}/admin/nodes`)).json()) as {
      pool: string;
      nodes: { id: string; attempts: number; in_flight: number }[];
    }[];
    assert.equal(body[0]?.pool, 'gpu');
    assert.equal(body[0]?.nodes[0]?.id, fleet.urls[0]);
    assert.ok((body[0]?.nodes[0]?.attempts ?? 0) >= 1);
    assert.equal(body[0]?.nodes[0]?.in_flight, 0);
  });

  it('answers unknown admin paths with a JSON 404', async () => {
    const r = await fetch(`${t.adminUrl}/nope`);
    assert.equal(r.status, 404);
    const body = (await r.json()) as { error: { code: string } };
    assert.equal(body.error.code, 'not_found');
  });

  it('reports not ready while draining', async () => {
    const local = await startTestSluice(basicConfig([fleet.urls[0]!]));
    try {
      const slow = await fetch(`${local.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '50' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'x' }],
          max_tokens: 6,
          stream: true,
        }),
      });
      const drained = local.sluice.drain(5000);
      assert.equal((await fetch(`${local.adminUrl}/readyz`)).status, 503);
      await slow.text();
      assert.equal(await drained, 0);
    } finally {
      await local.close();
    }
  });
});

describe('admin API config view', () => {
  const token = 'admin-token-for-the-config-view';
  const tokenDigest = createHash('sha256').update(token).digest('hex');
  const keyDigest = 'd'.repeat(64);
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    // Nothing listens on the Redis ports: the stores connect on first use, and nothing is sent.
    const yaml = basicConfig(
      fleet.urls,
      [
        'tenants:',
        `  - {name: team-a, keys: [{sha256: ${keyDigest}}, {env: SLUICE_TEST_TEAM_A_KEY}]}`,
        'rate_limits:',
        '  store: redis',
        '  redis: {url: "redis://:rate-limit-secret@127.0.0.1:21598/2", fail_mode: open}',
        'plugin_store:',
        '  store: redis',
        '  redis: {url: "redis://sluice:plugin-secret@127.0.0.1:21599"}',
        '',
      ].join('\n'),
    ).replace('  port: 0\npools:', `  port: 0\n  token: {sha256: ${tokenDigest}}\npools:`);
    process.env['SLUICE_TEST_TEAM_A_KEY'] = 'team-a-key';
    t = await startTestSluice(yaml);
  });

  after(async () => {
    delete process.env['SLUICE_TEST_TEAM_A_KEY'];
    await t?.close();
    await fleet?.close();
  });

  it('masks Redis passwords and key digests, and shows the rest as applied', async () => {
    const r = await fetch(`${t.adminUrl}/admin/config`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200);
    const text = await r.text();
    for (const secret of ['rate-limit-secret', 'plugin-secret', keyDigest, tokenDigest]) {
      assert.equal(text.includes(secret), false, `${secret} is shown`);
    }
    const body = JSON.parse(text) as {
      config: {
        admin: { token: unknown };
        tenants: { name: string; keys: unknown[] }[];
        rate_limits: { redis: { url: string; fail_mode: string } };
        plugin_store: { redis: { url: string } };
        pools: { nodes: { url: string }[] }[];
      };
    };
    assert.equal(body.config.rate_limits.redis.url, 'redis://:****@127.0.0.1:21598/2');
    assert.equal(body.config.rate_limits.redis.fail_mode, 'open');
    assert.equal(body.config.plugin_store.redis.url, 'redis://sluice:****@127.0.0.1:21599');
    assert.deepEqual(body.config.admin.token, { sha256: '****' });
    assert.deepEqual(body.config.tenants[0]!.keys, [{ sha256: '****' }, { env: 'SLUICE_TEST_TEAM_A_KEY' }]);
    assert.equal(body.config.pools[0]!.nodes[0]!.url, fleet.urls[0]);
    // The running config keeps its secrets: only the view is masked.
    assert.equal(
      t.sluice.current.config.rate_limits.redis?.url,
      'redis://:rate-limit-secret@127.0.0.1:21598/2',
    );
  });
});
