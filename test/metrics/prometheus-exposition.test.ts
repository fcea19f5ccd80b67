/**
 * `/metrics`: latency histograms by route × pool × node and by configured tenant with buckets that
 * count every request once, refusals by reason, the summaries that were there before, no API key
 * anywhere, and a text that `promtool check metrics` accepts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { readFile, writeFile } from 'node:fs/promises';
import { LOOPBACK_HEAD, basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { toolSkip } from '../helpers/tools.js';

const KEY = 'sk-exposition-secret-1234';

function chat(t: TestSluice, stream: boolean, key: string | null): Promise<Response> {
  return fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(key === null ? {} : { authorization: `Bearer ${key}` }),
    },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream }),
  });
}

/** The value of the one sample matching `re` (anchored on its line). */
function sample(text: string, re: string): number {
  const m = new RegExp(`^${re} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `no sample ${re}`);
  return Number(m[1]);
}

describe('Prometheus exposition', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;
  let text = '';

  before(async () => {
    process.env['SLUICE_TEST_EXPOSITION_KEY'] = KEY;
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(
      basicConfig(
        fleet.urls,
        `tenants:
  - name: team-a
    keys: [{ env: SLUICE_TEST_EXPOSITION_KEY }]
    limits: { requests_per_minute: 4 }
`,
      ),
    );
    for (let i = 0; i < 4; i++) {
      const r = await chat(t, i % 2 === 0, KEY);
      assert.equal(r.status, 200);
      await r.text();
    }
    const limited = await chat(t, false, KEY);
    assert.equal(limited.status, 429);
    await limited.text();
    const anonymous = await chat(t, false, null);
    assert.equal(anonymous.status, 401);
    await anonymous.text();
    text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('exposes end-to-end latency as a histogram per route, pool and node whose buckets add up to its count', () => {
    let total = 0;
    for (const url of fleet!.urls) {
      const labels = `route="all",pool="gpu",node="${url}"`;
      const count = sample(text, `sluice_route_request_duration_seconds_count\\{${labels}\\}`);
      const inf = sample(text, `sluice_route_request_duration_seconds_bucket\\{${labels},le="\\+Inf"\\}`);
      assert.equal(inf, count);
      assert.ok(sample(text, `sluice_route_request_duration_seconds_sum\\{${labels}\\}`) > 0);
      total += count;
    }
    assert.equal(total, 4, 'the four answered requests, each counted once');
    assert.match(text, /^# TYPE sluice_route_time_to_first_token_seconds histogram$/m);
    assert.match(
      text,
      /^sluice_route_inter_token_gap_seconds_count\{route="all",pool="gpu",node="[^"]+"\} [1-9]/m,
    );
  });

  it('keeps per-tenant histograms for configured tenants only', () => {
    assert.equal(sample(text, 'sluice_tenant_request_duration_seconds_count\\{tenant="team-a"\\}'), 5);
    const tenants = new Set([...text.matchAll(/tenant="([^"]*)"/g)].map((m) => m[1]));
    assert.deepEqual([...tenants], ['team-a']);
  });

  it('counts refusals by reason and status, overall and per tenant', () => {
    assert.equal(sample(text, 'sluice_refused_total\\{reason="rate_limit_requests",status="429"\\}'), 1);
    assert.equal(sample(text, 'sluice_refused_total\\{reason="invalid_api_key",status="401"\\}'), 1);
    assert.equal(
      sample(text, 'sluice_tenant_refused_total\\{tenant="team-a",reason="rate_limit_requests"\\}'),
      1,
    );
    assert.equal(sample(text, 'sluice_downstream_rejected_total\\{code="SLUICE_AUTH_INVALID_KEY"\\}'), 1);
  });

  it('keeps the summaries and counters that existed before', () => {
    assert.match(text, /^sluice_request_duration_seconds\{route="all",quantile="0.99"\} \d/m);
    assert.match(text, /^sluice_time_to_first_token_seconds_count\{route="all"\} 2$/m);
    assert.match(text, /^sluice_requests_total\{route="all",code="200"\} 4$/m);
  });

  it('exposes process gauges: event-loop delay and heap', () => {
    assert.ok(sample(text, 'sluice_heap_used_bytes') > 0);
    assert.match(text, /^sluice_event_loop_delay_p99_seconds \d/m);
    assert.match(text, /^sluice_node_drained\{pool="gpu",node="[^"]+"\} 0$/m);
  });

  it('never contains an API key', () => {
    assert.equal(text.includes(KEY), false);
  });

  it(
    'passes promtool check metrics',
    {
      skip: toolSkip(
        'promtool',
        'SLUICE_TEST_REQUIRE_PROMTOOL',
        'install it (`apt-get install -y prometheus`)',
      ),
    },
    () => {
      const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      assert.equal(r.error, undefined);
      assert.equal(r.status, 0, `promtool: ${r.stdout}${r.stderr}`);
      assert.equal(`${r.stdout}${r.stderr}`.trim(), '', 'no lint findings');
    },
  );
});

describe('Prometheus exposition, one node in two pools', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    const url = fleet.urls[0]!;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: a
    nodes: [{ url: ${url} }]
  - name: b
    nodes: [{ url: ${url} }]
routes:
  - { name: to-b, match: { headers: { x-pool: b } }, pool: b }
  - { name: to-a, match: {}, pool: a }
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('gives every series once, the node of each pool under its pool', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await chat(t!, false, null);
      assert.equal(r.status, 200);
      await r.text();
    }
    const text = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    const seen = new Set<string>();
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      const series = line.slice(0, line.lastIndexOf(' '));
      assert.equal(seen.has(series), false, `${series} appears twice`);
      seen.add(series);
    }
    const url = fleet!.urls[0]!;
    assert.equal(sample(text, `sluice_upstream_attempts_total\\{pool="a",node="${url}"\\}`), 2);
    assert.equal(sample(text, `sluice_upstream_attempts_total\\{pool="b",node="${url}"\\}`), 0);
  });

  it("keeps counting a pool's node across a reload that replaces its node object", async () => {
    const url = fleet!.urls[0]!;
    const attempts = async (): Promise<number> =>
      sample(
        await (await fetch(`${t!.adminUrl}/metrics`)).text(),
        `sluice_upstream_attempts_total\\{pool="a",node="${url}"\\}`,
      );
    const before = await attempts();
    assert.ok(before >= 2, `attempts ${before} before the reload`);
    // New connection settings make a new node object; the old one closes once its plan retires.
    const config = await readFile(t!.configPath, 'utf8');
    await writeFile(
      t!.configPath,
      config.replace(
        `  - name: a\n    nodes: [{ url: ${url} }]`,
        `  - name: a\n    connections_per_node: 7\n    nodes: [{ url: ${url} }]`,
      ),
    );
    const r = await t!.sluice.reload();
    assert.equal(r.result, 'applied', r.errors.join('\n'));
    const res = await chat(t!, false, null);
    assert.equal(res.status, 200);
    await res.text();
    await waitFor(
      () => [...t!.sluice.registry.all()].filter((n) => n.poolName === 'a').length === 1,
      5000,
      'the old node object to close',
    );
    assert.equal(await attempts(), before + 1);
    // The admin API counts the node the same way: the old object's attempts are not lost.
    const nodes = (await (await fetch(`${t!.adminUrl}/admin/nodes`)).json()) as {
      pool: string;
      nodes: { id: string; attempts: number; failures: number; in_flight: number }[];
    }[];
    const a = nodes.find((p) => p.pool === 'a')!.nodes.find((n) => n.id === url)!;
    assert.equal(a.attempts, before + 1, '/admin/nodes attempts over every object of the node');
    assert.equal(a.in_flight, 0);
  });
});
