/**
 * The benchmark's plan: knobs, target selection, CPU pinning of every process and of wrk, the URLs
 * of the targets, and the proxies' configuration files (Sluice's checked by Sluice's own loader).
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseConfig } from '../../../config/loader.js';
import { buildPlan, describePlan, wrkArgs, type BenchPlan } from '../../../loadtest/bench/bench-plan.js';
import {
  BenchSettingsError,
  DEFAULT_SETTINGS,
  estimatedSeconds,
  readSettings,
} from '../../../loadtest/bench/bench-settings.js';
import { UnknownTargetError, catalogue } from '../../../loadtest/bench/bench-targets.js';
import {
  BENCH_API_KEY,
  CHAT_BODY,
  COMPLETION_BODY,
  STREAM_BODY,
  STREAM_CHUNKS,
  STREAM_WRITES,
} from '../../../loadtest/bench/chat-fixtures.js';
import { OverlayError } from '../../../loadtest/bench/proxy-configs.js';
import { promptPrefix } from '../../helpers/prompt-prefix.js';

const PATHS = { root: '/src', distBench: '/src/dist/loadtest/bench', runDir: '/run', node: '/usr/bin/node' };

async function plan(
  env: Record<string, string> = {},
  overlays = new Map<string, string>(),
): Promise<BenchPlan> {
  let port = 20_000;
  return buildPlan(readSettings(env), PATHS, () => Promise.resolve(port++), overlays);
}

function portOf(url: string): number {
  return Number(new URL(url).port);
}

describe('benchmark settings', () => {
  it('defaults to three rounds of 10 s, and QUICK=1 to one short round that explicit knobs still override', () => {
    assert.deepEqual(readSettings({}), DEFAULT_SETTINGS);
    const quick = readSettings({ QUICK: '1' });
    assert.deepEqual([quick.runs, quick.durS, quick.warmS, quick.prewarmS], [1, 2, 1, 1]);
    assert.equal(readSettings({ QUICK: '1', DUR: '5' }).durS, 5);
  });

  it('reads target names and overlay files separated by spaces or commas', () => {
    const s = readSettings({ TARGETS: 'nginx, bare  sluice-min', EXTRA_SLUICE_CONFIGS: 'a.yaml,b.yaml' });
    assert.deepEqual([...(s.targets ?? [])], ['nginx', 'bare', 'sluice-min']);
    assert.deepEqual(s.extraConfigs, ['a.yaml', 'b.yaml']);
  });

  it('refuses malformed numbers and CPU lists, naming the knob', () => {
    assert.throws(
      () => readSettings({ RUNS: '0' }),
      (e: unknown) => e instanceof BenchSettingsError && /RUNS=0/.test(e.message),
    );
    assert.throws(() => readSettings({ DUR: '2.5' }), BenchSettingsError);
    assert.throws(() => readSettings({ PACE_MS: 'x' }), BenchSettingsError);
    assert.throws(() => readSettings({ PROXY_CPUS: '1;rm' }), BenchSettingsError);
    assert.equal(readSettings({ PACE_MS: '7.5', PROXY_CPUS: '0-1' }).paceMs, 7.5);
  });

  it('estimates a bounded run time that grows with targets and rounds', () => {
    const s = readSettings({});
    assert.ok(estimatedSeconds(s, 18) > estimatedSeconds(s, 6));
    assert.ok(estimatedSeconds(readSettings({ QUICK: '1' }), 18) < 300);
  });
});

describe('benchmark fixtures', () => {
  it('sends a 1,011-byte chat request whose prompt is longer than the 600 characters the affinity key reads', () => {
    assert.equal(Buffer.byteLength(CHAT_BODY), 1011);
    assert.equal((JSON.parse(STREAM_BODY) as { stream: boolean }).stream, true);
    assert.ok(promptPrefix(JSON.parse(CHAT_BODY), 10_000).length > 600);
  });

  it('answers with a 578-byte completion, or 64 SSE writes of about 150 bytes ending in [DONE]', () => {
    assert.equal(Buffer.byteLength(COMPLETION_BODY), 578);
    assert.equal(STREAM_WRITES.length, STREAM_CHUNKS);
    assert.equal(STREAM_CHUNKS, 64);
    for (const w of STREAM_WRITES.slice(0, -1)) assert.ok(w.length >= 140 && w.length <= 170, `${w.length}`);
    assert.ok(STREAM_WRITES.at(-1)!.endsWith('data: [DONE]\n\n'));
  });
});

describe('benchmark plan', () => {
  it('runs every target by default: the fast, slow, streamed and paced cases', async () => {
    const p = await plan();
    assert.deepEqual(
      p.targets.map((t) => t.name),
      catalogue().map((t) => t.name),
    );
    for (const name of ['direct', 'nginx', 'haproxy', 'bare', 'sluice-min', 'sluice-full']) {
      assert.equal(p.targets.find((t) => t.name === name)?.case, 'fast');
    }
    assert.deepEqual(
      p.targets.filter((t) => t.case === 'slow').map((t) => t.name),
      ['direct-slow', 'nginx-slow', 'bare-slow', 'sluice-slow'],
    );
  });

  it('pins proxies to the proxy CPU, stand-in nodes and wrk to the load CPU', async () => {
    const p = await plan({ PROXY_CPUS: '1', LOAD_CPUS: '0' });
    for (const proc of p.processes) assert.equal(proc.cpus, proc.role === 'proxy' ? '1' : '0', proc.name);
    for (const t of p.targets) {
      const args = wrkArgs(p, t, 10);
      assert.deepEqual(args.slice(0, 5), ['-c', '0', 'wrk', '-t1', `-c${t.conns}`]);
      assert.equal(args.at(-1), t.url);
      assert.ok(args.includes('-d10s'));
    }
  });

  it('points each target at a process of the plan, through the right stand-in node', async () => {
    const p = await plan({ SLOW_CONNS: '300', PACED_CONNS: '120' });
    const ports = new Set(p.processes.map((x) => x.port));
    const nodePort = (name: string): number => p.processes.find((x) => x.name === name)!.port;
    for (const t of p.targets) {
      assert.ok(t.url.endsWith('/v1/chat/completions'), t.url);
      if (t.proxy === 'direct') assert.equal(portOf(t.url), nodePort(t.nodeProcess), t.name);
      else if (t.proxy !== 'nginx') assert.ok(ports.has(portOf(t.url)), t.name);
      assert.equal(t.chunksPerReq, t.body === 'stream' ? 64 : 0);
    }
    assert.equal(p.targets.find((t) => t.name === 'sluice-slow')!.conns, 300);
    assert.equal(p.targets.find((t) => t.name === 'bare-paced')!.conns, 120);
    const slowNode = p.processes.find((x) => x.name === 'node-slow')!;
    assert.deepEqual(slowNode.args.slice(-4), ['--delay-ms', '20', '--chunk-gap-ms', '0']);
    const pacedNode = p.processes.find((x) => x.name === 'node-paced')!;
    assert.deepEqual(pacedNode.args.slice(-4), ['--delay-ms', '0', '--chunk-gap-ms', '5']);
    // The bare forwarder and Sluice of the paced case reach the paced node.
    for (const name of ['bare-paced', 'sluice-paced']) {
      const proc = p.processes.find((x) => x.name === name)!;
      const text = proc.sluiceConfig ?? proc.args.join(' ');
      assert.ok(text.includes(`127.0.0.1:${pacedNode.port}`), name);
    }
  });

  it('starts only what the selected targets need', async () => {
    const p = await plan({ TARGETS: 'bare sluice-stream' });
    assert.deepEqual(
      p.processes.map((x) => x.name),
      ['node-fast', 'bare-fast', 'sluice-min'],
    );
    await assert.rejects(plan({ TARGETS: 'bare sluice-mini' }), UnknownTargetError);
  });

  it('configures nginx with one worker, buffering off only for streams, and HAProxy with one thread', async () => {
    const p = await plan();
    const nginx = p.files.find((f) => f.path.endsWith('nginx.conf'))!.text;
    assert.match(nginx, /^worker_processes 1;$/m);
    assert.equal(nginx.match(/listen 127\.0\.0\.1:/g)?.length, 4);
    assert.equal(nginx.match(/proxy_buffering off;/g)?.length, 2);
    assert.equal(nginx.match(/keepalive 256;/g)?.length, 3);
    const haproxy = p.files.find((f) => f.path.endsWith('haproxy.cfg'))!.text;
    assert.match(haproxy, /nbthread 1/);
    assert.match(haproxy, /http-reuse always/);
  });

  it('writes Sluice configurations that Sluice accepts, the full one with a tenant, affinity and admission', async () => {
    const p = await plan();
    const sluices = p.processes.filter((x) => x.sluiceConfig !== null);
    assert.deepEqual(
      sluices.map((x) => x.name),
      ['sluice-min', 'sluice-full', 'sluice-slow', 'sluice-paced'],
    );
    for (const s of sluices) {
      const r = parseConfig(s.sluiceConfig!, `${s.name}.yaml`);
      assert.ok(r.ok, `${s.name}: ${JSON.stringify(r.ok ? null : r.errors)}`);
      assert.equal(r.config.listeners[0]!.port, s.port);
      assert.equal(s.env['BENCH_API_KEY'], BENCH_API_KEY);
    }
    const full = parseConfig(sluices[1]!.sluiceConfig!, 'full.yaml');
    assert.ok(full.ok);
    const pool = full.config.pools[0]!;
    assert.equal(pool.balance.kind, 'consistent-hash');
    assert.deepEqual(pool.balance.affinity, { source: 'prefix', chars: 600 });
    assert.equal(full.config.tenants?.[0]?.name, 'bench');
    assert.equal(full.config.routes[0]!.route_header, true);
    const min = parseConfig(sluices[0]!.sluiceConfig!, 'min.yaml');
    assert.ok(min.ok);
    assert.equal(min.config.tenants?.length ?? 0, 0);
  });

  it('lays an extra configuration over the minimal one as its own target, keeping the benchmark’s ports', async () => {
    const overlay = 'server: { drain_timeout_ms: 1234 }\nlisteners: [{ name: x, port: 1 }]\n';
    const p = await plan(
      { EXTRA_SLUICE_CONFIGS: 'configs/drain.yaml' },
      new Map([['configs/drain.yaml', overlay]]),
    );
    const t = p.targets.find((x) => x.name === 'sluice-x-drain');
    assert.equal(t?.case, 'fast');
    const proc = p.processes.find((x) => x.name === 'sluice-x-drain')!;
    const r = parseConfig(proc.sluiceConfig!, 'x.yaml');
    assert.ok(r.ok, JSON.stringify(r.ok ? null : r.errors));
    assert.equal(r.config.server.drain_timeout_ms, 1234);
    assert.equal(r.config.listeners[0]!.port, proc.port);
    assert.equal(r.config.pools[0]!.nodes[0]!.url, `http://127.0.0.1:${p.processes[0]!.port}`);
    await assert.rejects(
      plan({ EXTRA_SLUICE_CONFIGS: 'bad.yaml' }, new Map([['bad.yaml', '- a list\n']])),
      OverlayError,
    );
  });

  it('substitutes ${UPSTREAM} in an overlay that brings its own pools', async () => {
    const overlay =
      'pools:\n  - name: up\n    balance: { kind: least-request }\n    nodes: [{ url: "${UPSTREAM}" }]\n';
    const p = await plan(
      { TARGETS: 'sluice-x-lr', EXTRA_SLUICE_CONFIGS: 'lr.yml' },
      new Map([['lr.yml', overlay]]),
    );
    const r = parseConfig(p.processes.find((x) => x.name === 'sluice-x-lr')!.sluiceConfig!, 'lr.yml');
    assert.ok(r.ok);
    assert.equal(r.config.pools[0]!.balance.kind, 'least-request');
    assert.equal(r.config.pools[0]!.nodes[0]!.url, `http://127.0.0.1:${p.processes[0]!.port}`);
  });

  it('describes the plan with every process and target for a dry run', async () => {
    const p = await plan({ TARGETS: 'nginx sluice-full' });
    const text = describePlan(p);
    assert.match(text, /nginx\s+cpu 1\s+taskset -c 1 nginx -p \/run\/nginx\//);
    assert.match(
      text,
      /sluice-full\s+cpu 1\s+taskset -c 1 \/usr\/bin\/node \/src\/bin\/sluice\.js serve --no-watch/,
    );
    assert.match(text, /taskset -c 0 wrk -t1 -c50 -d10s --timeout 10s -s \/src\/loadtest\/bench\/post\.lua/);
  });
});
