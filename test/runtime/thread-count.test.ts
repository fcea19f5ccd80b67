/**
 * `server.workers: auto` (the default): one thread per core the process may use, or one while the
 * config holds a feature whose state each thread would keep for itself. The count from a cgroup
 * quota, the resolution, and a real Sluice started with auto on two cores: two threads serving one
 * port, `/admin/config` saying how many and why, and a reload that would need one thread refused
 * with its reason, while the old config keeps serving. `sluice serve --cores` is tested as a child.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  availableCores,
  cfsQuotaCpus,
  cgroupCpus,
  quotaCpus,
  resolveThreads,
} from '../../proxy/runtime/thread-count.js';
import { workerExecArgv } from '../../proxy/runtime/worker-set.js';
import { configOf, yamlLines } from '../config/config-fixtures.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { exitWithin, runSluice } from '../helpers/sluice-cli.js';

const PLAIN = [
  'listeners: [{name: public, address: 127.0.0.1, port: 8080}]',
  'pools: [{name: gpu, nodes: [{url: "http://127.0.0.1:9100"}]}]',
  'routes: [{name: all, pool: gpu}]',
];

describe('the cores auto counts', { timeout: 10_000 }, () => {
  it('reads a cgroup v2 CPU quota, rounded up, and no quota as none', () => {
    assert.equal(quotaCpus('200000 100000\n'), 2);
    assert.equal(quotaCpus('150000 100000'), 2);
    assert.equal(quotaCpus('50000 100000'), 1);
    assert.equal(quotaCpus('max 100000\n'), null);
    assert.equal(quotaCpus(''), null);
    assert.equal(quotaCpus('garbage here'), null);
  });

  it('reads a cgroup v1 CFS quota, and -1 as none', () => {
    assert.equal(cfsQuotaCpus('300000\n', '100000\n'), 3);
    assert.equal(cfsQuotaCpus('-1', '100000'), null);
    assert.equal(cfsQuotaCpus('x', '100000'), null);
  });

  it("takes the smallest quota of the process's cgroup and its ancestors, v2 and v1", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-cgroup-'));
    const put = async (path: string, text: string): Promise<void> => {
      await mkdir(join(dir, path, '..'), { recursive: true });
      await writeFile(join(dir, path), text);
    };
    try {
      // cgroup v2: a systemd service's quota (1.5 CPUs) under a slice without one.
      await put('v2/cpu.max', 'max 100000\n');
      await put('v2/system.slice/cpu.max', 'max 100000\n');
      await put('v2/system.slice/sluice.service/cpu.max', '150000 100000\n');
      await put('self-v2', '0::/system.slice/sluice.service\n');
      assert.equal(await cgroupCpus(join(dir, 'v2'), join(dir, 'self-v2')), 2);
      // cgroup v1: the container's quota (3 CPUs) under a parent that allows 2.
      await put('v1/cpu,cpuacct/cpu.cfs_quota_us', '-1\n');
      await put('v1/cpu,cpuacct/cpu.cfs_period_us', '100000\n');
      await put('v1/cpu,cpuacct/kubepods/cpu.cfs_quota_us', '200000\n');
      await put('v1/cpu,cpuacct/kubepods/cpu.cfs_period_us', '100000\n');
      await put('v1/cpu,cpuacct/kubepods/pod1/cpu.cfs_quota_us', '300000\n');
      await put('v1/cpu,cpuacct/kubepods/pod1/cpu.cfs_period_us', '100000\n');
      await put('self-v1', '12:memory:/kubepods/pod1\n4:cpu,cpuacct:/kubepods/pod1\n0::/\n');
      assert.equal(await cgroupCpus(join(dir, 'v1'), join(dir, 'self-v1')), 2);
      // No quota anywhere, or no cgroup file: none; the cores are then the affinity mask's.
      await put('self-root', '0::/\n');
      assert.equal(await cgroupCpus(join(dir, 'v2'), join(dir, 'self-root')), null);
      assert.equal(await cgroupCpus(join(dir, 'v2'), join(dir, 'missing')), null);
      assert.equal(
        await availableCores(join(dir, 'v2'), join(dir, 'self-v2')),
        Math.min(2, availableParallelism()),
      );
      assert.equal(await availableCores(join(dir, 'v2'), join(dir, 'missing')), availableParallelism());
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the Node options a worker thread starts with', { timeout: 10_000 }, () => {
  it('drops those naming the main script source, keeps the rest', () => {
    assert.deepEqual(
      workerExecArgv([
        '--input-type=module',
        '-e',
        'code()',
        '--max-old-space-size=512',
        '--enable-source-maps',
      ]),
      ['--max-old-space-size=512', '--enable-source-maps'],
    );
    assert.deepEqual(workerExecArgv(['--input-type', 'module', '--print', '1', '--cpu-prof']), [
      '--cpu-prof',
    ]);
    assert.deepEqual(workerExecArgv(['--eval=x()', '--trace-gc']), ['--trace-gc']);
  });
});

describe('resolving server.workers', { timeout: 10_000 }, () => {
  it('takes a number as written and auto as the cores, up to 64', () => {
    assert.deepEqual(resolveThreads(configOf(yamlLines('server: {workers: 3}', ...PLAIN)), 8), {
      threads: 3,
      reason: 'server.workers 3',
    });
    const auto = configOf(yamlLines(...PLAIN));
    assert.deepEqual(resolveThreads(auto, 4, 'linux'), {
      threads: 4,
      reason: 'server.workers auto: 4 cores',
    });
    assert.deepEqual(resolveThreads(auto, 1, 'linux'), { threads: 1, reason: 'server.workers auto: 1 core' });
    assert.deepEqual(resolveThreads(auto, 200, 'linux'), {
      threads: 64,
      reason: 'server.workers auto: 200 cores, at most 64 threads',
    });
    assert.deepEqual(resolveThreads(auto, 8, 'darwin'), {
      threads: 1,
      reason:
        "server.workers auto: 1 thread, since threads share a port's connections only on Linux (this is darwin)",
    });
  });

  it('keeps auto at one thread, naming why, while the config holds a per-thread feature', () => {
    // Micro-batching, sticky sessions, the batch API, the adaptive limit and reserve_per_node are
    // shared: they do not keep auto at one thread.
    const shared = configOf(
      yamlLines(
        'listeners: [{name: public, address: 127.0.0.1, port: 8080}]',
        'pools: [{name: gpu, admission: {adaptive: {}, reserve_per_node: 1}, nodes: [{url: "http://127.0.0.1:9100"}]}, {name: canary, nodes: [{url: "http://127.0.0.1:9101"}]}]',
        'routes:',
        '  - {name: emb, match: {path: /v1/embeddings}, pool: gpu, batching: {mode: fanout}}',
        '  - {name: chat, split: [{pool: gpu, weight: 9}, {pool: canary, weight: 1}], sticky_header: x-session-id}',
        'batch_api: {}',
      ),
    );
    assert.deepEqual(resolveThreads(shared, 8, 'linux'), {
      threads: 8,
      reason: 'server.workers auto: 8 cores',
    });
    const cacheAware = configOf(
      yamlLines(
        'listeners: [{name: public, address: 127.0.0.1, port: 8080}]',
        'pools: [{name: gpu, balance: {kind: cache-aware}, nodes: [{url: "http://127.0.0.1:9100"}]}]',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    const r = resolveThreads(cacheAware, 8, 'linux');
    assert.equal(r.threads, 1);
    assert.match(
      r.reason,
      /^server\.workers auto: 1 thread of 8 cores, since the config holds what worker threads cannot share yet: pool "gpu"'s cache-aware balancing \(its prefix index/,
    );
    const plugin = (store: string): string[] => [
      ...PLAIN,
      'plugins: [{name: hdr, use: ./p.js}]',
      `plugin_store: {store: ${store}${store === 'redis' ? ', redis: {url: "redis://127.0.0.1:6379"}' : ''}}`,
    ];
    const withMemoryStore = resolveThreads(configOf(yamlLines(...plugin('memory'))), 8, 'linux');
    assert.equal(withMemoryStore.threads, 1);
    assert.match(withMemoryStore.reason, /plugins with the memory plugin store/);
    assert.equal(resolveThreads(configOf(yamlLines(...plugin('redis'))), 8, 'linux').threads, 8);
  });
});

const ANSWER = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] });

describe('server.workers auto on two cores', { timeout: 60_000 }, () => {
  let node: ScriptedNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(ANSWER);
      });
    });
    t = await startTestSluice(basicConfig([node.url]), { cores: 2 });
  });
  after(async () => {
    await t?.close();
    await node?.close();
  });

  it('starts a worker thread and says how many threads and why', async () => {
    assert.notEqual(t!.sluice.workers, null, 'a worker thread runs');
    const view = (await (await fetch(`${t!.adminUrl}/admin/config`)).json()) as Record<string, unknown>;
    assert.equal(view['threads'], 2);
    assert.equal(view['threads_reason'], 'server.workers auto: 2 cores');
    assert.ok(
      t!.logs.some((l) => l.includes('serving with 2 threads (server.workers auto: 2 cores)')),
      'the start is logged with the count',
    );
    const replies = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const r = await fetch(`${t!.url}/v1/chat/completions`, {
          ...chatRequest(),
          headers: { 'content-type': 'application/json', connection: 'close' },
        });
        await r.arrayBuffer();
        return r.status;
      }),
    );
    assert.deepEqual(replies, Array<number>(16).fill(200));
    const text = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    const worker = /^sluice_thread_requests_total\{thread="1"\} (\d+)$/m.exec(text)?.[1];
    assert.ok(Number(worker) > 0, `the worker thread served some of 16 connections (${worker ?? 'none'})`);
  });

  it('refuses a reload that adds what the threads cannot share, and keeps serving the old config', async () => {
    const withReserve = basicConfig([node!.url]).replace(
      '  - name: gpu\n',
      '  - name: gpu\n    balance: {kind: cache-aware}\n',
    );
    await writeFile(t!.configPath, withReserve);
    const r = await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' });
    const body = (await r.json()) as { result: string; errors: string[] };
    assert.equal(body.result, 'rejected');
    assert.equal(r.status >= 400, true, `status ${r.status}`);
    assert.equal(body.errors.length, 1);
    assert.match(
      body.errors[0]!,
      /pools\[0\]\.balance\.kind: pool "gpu"'s cache-aware balancing \(.*\) is not shared across worker threads yet, and this process serves with 2 threads \(server\.workers auto: 2 cores\); restart Sluice to serve it on one thread$/,
    );
    const res = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  });
});

describe('sluice serve --cores', { timeout: 30_000 }, () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-cores-'));
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('refuses a count that is not a whole number of cores, with usage', async () => {
    for (const bad of ['0', 'two', '1.5']) {
      const p = runSluice(['serve', '--config', join(dir, 'none.yaml'), '--cores', bad]);
      try {
        assert.equal(await exitWithin(p, 10_000), 2);
        assert.match(p.out(), /--cores needs a whole number of cores from 1 to 1024 \(got "[^"]+"\)/);
        assert.match(p.out(), /usage: sluice serve \[--config FILE\] \[--no-watch\] \[--cores N\]/);
      } finally {
        p.child.kill('SIGKILL');
      }
    }
  });

  it('serves with the threads auto finds on the cores given', async () => {
    const file = join(dir, 'sluice.yaml');
    await writeFile(
      file,
      yamlLines(
        'listeners: [{name: public, address: 127.0.0.1, port: 0}]',
        'admin: {address: 127.0.0.1, port: 0}',
        'pools: [{name: gpu, nodes: [{url: "http://127.0.0.1:9"}]}]',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    const p = runSluice(['serve', '--config', file, '--no-watch', '--cores', '2']);
    try {
      const deadline = Date.now() + 20_000;
      while (!p.out().includes('admin API on') && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      assert.match(p.out(), /serving with 2 threads \(server\.workers auto: 2 cores\)/);
    } finally {
      p.child.kill('SIGKILL');
      await p.exit;
    }
  });
});
