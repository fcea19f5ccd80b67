/**
 * Operating Sluice through the admin listener: the bearer token guards everything but /healthz
 * (Basic with the token as password works too, for browsers), nodes are drained and undrained by
 * pool and node, /readyz stays 503 until the first plan serves, and /admin/stats and
 * /admin/histograms answer with what was recorded.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decodeFromCompressedBase64 } from 'hdr-histogram-js';
import { loadConfigFile } from '../../config/loader.js';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { Sluice } from '../../proxy/runtime/sluice.js';
import { runStatsCli } from '../../proxy/cli/stats-cli.js';
import { redisSkip, startRedis, type TestRedis } from '../helpers/redis.js';
import {
  basicConfig,
  chatRequest,
  findNode,
  memoryLogger,
  startTestSluice,
  waitFor,
  type TestSluice,
} from '../helpers/sluice.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const TOKEN = 'admin-token-for-tests';

describe('admin token', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    process.env['SLUICE_TEST_ADMIN_TOKEN'] = TOKEN;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    const yaml = basicConfig(fleet.urls).replace(
      '  port: 0\npools:',
      '  port: 0\n  token: { env: SLUICE_TEST_ADMIN_TOKEN }\npools:',
    );
    assert.match(yaml, /token: \{ env: SLUICE_TEST_ADMIN_TOKEN \}/);
    t = await startTestSluice(yaml);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('answers /healthz without the token', async () => {
    assert.equal((await fetch(`${t!.adminUrl}/healthz`)).status, 200);
  });

  it('refuses every other endpoint without the token, or with a wrong one', async () => {
    for (const path of ['/readyz', '/metrics', '/admin/stats', '/admin/nodes', '/admin/config', '/']) {
      const r = await fetch(`${t!.adminUrl}${path}`);
      assert.equal(r.status, 401, path);
      await r.text();
    }
    const wrong = await fetch(`${t!.adminUrl}/metrics`, { headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    const post = await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' });
    assert.equal(post.status, 401);
    assert.equal(((await post.json()) as { error: { code: string } }).error.code, 'admin_unauthorized');
  });

  it('accepts the token as a bearer, and as the Basic password a browser sends for the status page', async () => {
    const bearer = await fetch(`${t!.adminUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(bearer.status, 200);
    assert.match(await bearer.text(), /sluice_config_version 1/);
    const page = await fetch(`${t!.adminUrl}/`);
    assert.equal(page.status, 401);
    assert.match(page.headers.get('www-authenticate') ?? '', /^Basic /);
    const basic = Buffer.from(`admin:${TOKEN}`).toString('base64');
    const ok = await fetch(`${t!.adminUrl}/`, { headers: { authorization: `Basic ${basic}` } });
    assert.equal(ok.status, 200);
    assert.match(await ok.text(), /<title>Sluice status<\/title>/);
  });

  it('lets sluice stats read the instance with SLUICE_ADMIN_TOKEN', async () => {
    await (await fetch(`${t!.url}/v1/chat/completions`, chatRequest())).text();
    const out: string[] = [];
    const err: string[] = [];
    const io = { stdout: (s: string) => out.push(s), stderr: (s: string) => err.push(s) };
    delete process.env['SLUICE_ADMIN_TOKEN'];
    assert.equal(await runStatsCli(['--admin', t!.adminUrl], io), 1);
    assert.match(err.join(''), /401.*set SLUICE_ADMIN_TOKEN/s);
    process.env['SLUICE_ADMIN_TOKEN'] = TOKEN;
    try {
      assert.equal(await runStatsCli(['--admin', t!.adminUrl], io), 0);
    } finally {
      delete process.env['SLUICE_ADMIN_TOKEN'];
    }
    assert.match(out.join(''), /^all\s+1\s/m);
  });
});

describe('node drain', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig(fleet.urls));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  async function spread(n: number): Promise<[number, number]> {
    const a = findNode(t!, fleet!.urls[0]!)!;
    const b = findNode(t!, fleet!.urls[1]!)!;
    const a0 = a.attempts;
    const b0 = b.attempts;
    for (let i = 0; i < n; i++) {
      const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
      assert.equal(r.status, 200);
      await r.text();
    }
    return [a.attempts - a0, b.attempts - b0];
  }

  it('sends no new request to a drained node and takes it back after undrain', async () => {
    const hostPort = fleet!.urls[0]!.replace('http://', '');
    const drained = await fetch(`${t!.adminUrl}/admin/nodes/gpu/${encodeURIComponent(hostPort)}/drain`, {
      method: 'POST',
    });
    assert.equal(drained.status, 200);
    assert.deepEqual(await drained.json(), {
      pool: 'gpu',
      node: fleet!.urls[0],
      drained: true,
      in_flight: 0,
    });
    assert.deepEqual(await spread(10), [0, 10]);
    const nodes = (await (await fetch(`${t!.adminUrl}/admin/nodes`)).json()) as {
      nodes: { id: string; drained: boolean }[];
    }[];
    assert.equal(nodes[0]!.nodes.find((n) => n.id === fleet!.urls[0])!.drained, true);
    const metrics = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    assert.match(
      metrics,
      new RegExp(`^sluice_node_drained\\{pool="gpu",node="${fleet!.urls[0]}"\\} 1$`, 'm'),
    );
    const back = await fetch(`${t!.adminUrl}/admin/nodes/gpu/0/undrain`, { method: 'POST' });
    assert.equal(back.status, 200);
    const [a, b] = await spread(10);
    assert.ok(a > 0 && b > 0, `after undrain: ${a} and ${b}`);
  });

  it('keeps a node drained across a reload', async () => {
    await fetch(`${t!.adminUrl}/admin/nodes/gpu/1/drain`, { method: 'POST' });
    await writeFile(t!.configPath, basicConfig(fleet!.urls, '', { route: '    route_header: true' }));
    const r = (await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as {
      result: string;
    };
    assert.equal(r.result, 'applied');
    assert.deepEqual(await spread(6), [6, 0]);
    await fetch(`${t!.adminUrl}/admin/nodes/gpu/1/undrain`, { method: 'POST' });
  });

  it('keeps a node drained across a reload that changes its connection settings', async () => {
    // connect_ms is part of a node's connections: the reload builds new node objects.
    await fetch(`${t!.adminUrl}/admin/nodes/gpu/1/drain`, { method: 'POST' });
    await writeFile(
      t!.configPath,
      basicConfig(fleet!.urls, '', {
        route: '    route_header: true',
        pool: '    timeouts: { connect_ms: 1234 }',
      }),
    );
    const r = (await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as {
      result: string;
    };
    assert.equal(r.result, 'applied');
    assert.deepEqual(await spread(6), [6, 0]);
    await fetch(`${t!.adminUrl}/admin/nodes/gpu/1/undrain`, { method: 'POST' });
  });

  it('finds a node by its URL in any form the config accepts', async () => {
    const url = fleet!.urls[1]!;
    for (const form of [`${url}/`, url.toUpperCase().replace('127.0.0.1', '127.0.0.1')]) {
      const r = await fetch(`${t!.adminUrl}/admin/nodes/gpu/${encodeURIComponent(form)}/drain`, {
        method: 'POST',
      });
      assert.equal(r.status, 200, `${form}: ${await r.text()}`);
      const u = await fetch(`${t!.adminUrl}/admin/nodes/gpu/${encodeURIComponent(form)}/undrain`, {
        method: 'POST',
      });
      assert.equal(u.status, 200);
      await u.text();
    }
  });

  it('answers 404 for an unknown pool or node', async () => {
    assert.equal((await fetch(`${t!.adminUrl}/admin/nodes/nope/0/drain`, { method: 'POST' })).status, 404);
    assert.equal((await fetch(`${t!.adminUrl}/admin/nodes/gpu/9/drain`, { method: 'POST' })).status, 404);
  });

  it('answers 400 for a malformed percent-escape in a pool or node name', async () => {
    const r = await fetch(`${t!.adminUrl}/admin/nodes/gpu/%ZZ/drain`, { method: 'POST' });
    const body = (await r.json()) as { error: { code: string; message: string } };
    assert.equal(r.status, 400);
    assert.equal(body.error.code, 'invalid_request');
    assert.match(body.error.message, /percent-escape/);
  });

  it('returns mergeable compressed histograms for a metric, and 400 for an unknown one', async () => {
    const body = (await (
      await fetch(`${t!.adminUrl}/admin/histograms?metric=duration&view=total`)
    ).json()) as {
      unit: string;
      value_scale: number;
      histograms: { route: string; node: string; count: number; hdr: string }[];
    };
    assert.equal(body.unit, 'seconds');
    assert.equal(body.value_scale, 1e-6);
    const total = body.histograms.reduce((n, h) => n + h.count, 0);
    assert.ok(total >= 26, `${total} requests`);
    for (const h of body.histograms) {
      const decoded = decodeFromCompressedBase64(h.hdr, 64);
      assert.equal(decoded.totalCount, h.count);
      assert.ok(decoded.getValueAtPercentile(50) > 0);
    }
    const bad = await fetch(`${t!.adminUrl}/admin/histograms?metric=nope`);
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /metric must be one of duration, ttfb, ttft/);
  });
});

describe('readiness before the first plan', { timeout: 30_000, skip: redisSkip() }, () => {
  let redis: TestRedis | undefined;
  let fleet: SimFleet | undefined;
  let sluice: Sluice | undefined;
  let dir = '';

  before(async () => {
    redis = await startRedis();
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    dir = await mkdtemp(join(tmpdir(), 'sluice-readyz-'));
  });

  after(async () => {
    redis?.resume();
    await sluice?.close();
    await fleet?.close();
    await redis?.stop();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('answers /healthz at once and /readyz 503 until the listeners serve', async () => {
    const path = join(dir, 'sluice.yaml');
    await writeFile(
      path,
      basicConfig(fleet!.urls, `batch_api:\n  jobs:\n    store: redis\n    redis: { url: ${redis!.url} }\n`),
    );
    const loaded = await loadConfigFile(path);
    assert.ok(loaded.ok);
    // A frozen Redis holds the start between the admin listener and the proxy listeners.
    redis!.pause();
    const s = new Sluice(path, memoryLogger([]));
    sluice = s;
    const started = s.start(loaded.config, loaded.digest, false);
    await waitFor(() => s.adminPort !== 0, 10_000, 'the admin listener');
    const admin = `http://127.0.0.1:${s.adminPort}`;
    assert.equal((await fetch(`${admin}/healthz`)).status, 200);
    assert.equal((await fetch(`${admin}/readyz`)).status, 503);
    redis!.resume();
    await started;
    assert.equal((await fetch(`${admin}/readyz`)).status, 200);
  });
});
