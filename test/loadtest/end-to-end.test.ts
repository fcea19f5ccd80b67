/**
 * Short real runs through `runLoadtestCli`: an in-process `fast` fleet, direct and behind a Sluice
 * child process, open loop with the SSE client and closed loop with autocannon; open-loop latency
 * that grows when arrivals outpace a one-slot node; a refused target and an invalid scenario ending
 * with a message and an exit code; `compare` on two results.
 */

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runLoadtestCli } from '../../loadtest/cli.js';
import { startSimFleet } from '../../loadtest/sim/fleet.js';
import { refusedPort } from '../helpers/refused-port.js';
import { exitWithin, runSluice } from '../helpers/sluice-cli.js';
import type { LoadtestResult } from '../../loadtest/report/result.js';

let dir = '';

interface CliRun {
  code: number;
  stdout: string[];
  stderr: string[];
}

async function cli(args: string[]): Promise<CliRun> {
  const out: CliRun = { code: -1, stdout: [], stderr: [] };
  out.code = await runLoadtestCli(args, {
    stdout: (l) => out.stdout.push(l),
    stderr: (l) => out.stderr.push(l),
    signal: new AbortController().signal,
  });
  return out;
}

async function scenario(name: string, text: string): Promise<string> {
  const file = join(dir, `${name}.yaml`);
  await writeFile(file, text);
  return file;
}

async function result(stem: string): Promise<LoadtestResult> {
  return JSON.parse(await readFile(join(dir, 'out', `${stem}.json`), 'utf8')) as LoadtestResult;
}

const SLUICE_CONFIG = `    sluice:
      config: |
        listeners: [{ name: public, address: 127.0.0.1, port: {{port}} }]
        admin: { address: 127.0.0.1, port: {{admin_port}} }
        pools: [{ name: gpu, nodes: {{nodes}} }]
        routes: [{ name: all, match: {}, pool: gpu }]
`;

const CHAT_SCENARIO = `name: chat
seed: 3
duration_s: 1
drain_s: 5
load: { mode: open, rate: 60 }
fleet: { nodes: 2, profile: fast, profile_overrides: { decode_base_ms: 2 } }
workload:
  sessions: 8
  tenants:
    - { name: a, api_key: key-a }
    - { name: b, api_key: key-b, weight: 3 }
  mix:
    - kind: chat
      system_prompt_tokens: 400
      turns: 3
      user_tokens: 20
      output_tokens: 8
variants:
  - name: direct
  - name: sluice
${SLUICE_CONFIG}`;

function checkChatResult(r: LoadtestResult): void {
  assert.equal(r.requests.errors, 0, JSON.stringify(r.errors));
  assert.ok(r.requests.ok >= 50, `ok ${r.requests.ok}`);
  const { e2e, ttft, itl } = r.latency_ms;
  assert.equal(ttft.count, r.requests.ok);
  assert.ok(
    (ttft.p50_ms ?? Infinity) < (e2e.p50_ms ?? 0),
    `TTFT p50 ${ttft.p50_ms} below e2e p50 ${e2e.p50_ms}`,
  );
  assert.ok((ttft.max_ms ?? Infinity) <= (e2e.max_ms ?? 0));
  assert.ok(itl.count >= r.requests.ok * 6, 'seven gaps per eight-token stream');
  assert.equal(r.nodes.length, 2);
  assert.equal(
    r.nodes.reduce((s, n) => s + n.served, 0),
    r.requests.ok,
  );
  assert.ok(Math.abs(r.nodes.reduce((s, n) => s + n.share, 0) - 1) < 1e-9);
  for (const n of r.nodes) assert.ok(n.utilisation !== null && n.utilisation > 0 && n.utilisation < 1);
  assert.ok((r.prefix_cache.hit_rate ?? 0) > 0.3, `hit rate ${r.prefix_cache.hit_rate}`);
  assert.deepEqual(
    r.tenants.map((t) => t.name),
    ['a', 'b'],
  );
  assert.ok((r.tenants[1]?.share ?? 0) > 0.6);
}

describe('loadtest end to end', () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-loadtest-test-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('runs streamed chat sessions direct and through a Sluice child, writing JSON, .hgrm and SVG', async () => {
    const file = await scenario('chat', CHAT_SCENARIO);
    const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
    assert.equal(run.code, 0, run.stderr.join('\n'));
    const direct = await result('chat-direct');
    const proxied = await result('chat-sluice');
    checkChatResult(direct);
    checkChatResult(proxied);
    assert.equal(direct.target.kind, 'direct');
    assert.equal(proxied.target.kind, 'sluice');
    assert.equal(direct.load.driver, 'open-loop');
    assert.ok(proxied.target.sluice_cpu_ms !== null && proxied.target.sluice_cpu_ms > 0);
    for (const suffix of ['.hgrm', '-ttft.hgrm', '.svg'])
      assert.ok(existsSync(join(dir, 'out', `chat-direct${suffix}`)), suffix);
    assert.ok(existsSync(join(dir, 'out', 'chat-variants.svg')));
    const ttftPlot = await readFile(join(dir, 'out', 'chat-variants-ttft.svg'), 'utf8');
    assert.match(ttftPlot, /time to first token by variant/);
    assert.match(ttftPlot, /data-series="direct"[\s\S]*data-series="sluice"/);
    const report = run.stdout.join('\n');
    // The routing summary: every variant with hit rate, TTFT p50/p99/p99.9 and e2e p99, ratios to the first.
    assert.match(
      report,
      /variant\s+ok\/s\s+hit rate\s+TTFT p50\s+TTFT p99\s+TTFT p99\.9\s+e2e p50\s+e2e p99/,
    );
    assert.match(report, /\nsluice\s+[\d.]+\s+[\d.]+%.*\(\d+\.\d\d×\)/);
    assert.match(report, /chat \/ sluice: open loop, 60 arrivals\/s/);
    assert.match(report, /prefix cache hit rate: \d+\.\d%/);
    assert.match(report, /metric\s+a: chat\/direct\s+b: chat\/sluice\s+b\/a/);

    const compared = await cli([
      'compare',
      join(dir, 'out', 'chat-direct.json'),
      join(dir, 'out', 'chat-sluice.json'),
    ]);
    assert.equal(compared.code, 0);
    assert.match(compared.stdout.join('\n'), /TTFT p99 \(ms\)/);
  });

  it('drives plain requests closed loop with autocannon', async () => {
    const file = await scenario(
      'closed',
      `name: closed\nduration_s: 1\nload: { mode: closed, connections: 4 }\nfleet: { nodes: 1, profile: fast }\n` +
        'workload:\n  mix:\n    - { kind: chat, stream: false, user_tokens: 10, output_tokens: 4 }\n    - { kind: embedding, items: 3 }\n',
    );
    const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
    assert.equal(run.code, 0, run.stderr.join('\n'));
    const r = await result('closed-default');
    assert.equal(r.load.driver, 'autocannon');
    assert.ok(r.requests.ok > 50 && r.requests.errors === 0, JSON.stringify(r.requests));
    assert.equal(r.latency_ms.ttft.count, 0);
    assert.deepEqual(
      r.kinds.map((k) => k.name),
      ['chat', 'embedding'],
    );
    // autocannon drops the requests in flight when it stops (at most one per connection).
    const served = r.nodes[0]?.served ?? 0;
    assert.ok(
      served >= r.requests.ok && served <= r.requests.ok + 4,
      `served ${served}, ok ${r.requests.ok}`,
    );
  });

  it('streams closed loop with its own SSE client against a fleet in a child process', async () => {
    const file = await scenario(
      'child',
      `name: child\nduration_s: 1\nload: { mode: closed, connections: 3 }\n` +
        'fleet: { nodes: 2, profile: fast, process: child, speed_factors: [1, 2] }\n' +
        'workload:\n  mix:\n    - { kind: chat, system_prompt_tokens: 200, user_tokens: 10, output_tokens: 6 }\n',
    );
    const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
    assert.equal(run.code, 0, run.stderr.join('\n'));
    const r = await result('child-default');
    assert.equal(r.load.driver, 'closed-loop');
    assert.equal(r.fleet?.process, 'child');
    assert.ok(r.requests.ok > 20 && r.requests.errors === 0, JSON.stringify(r.requests));
    assert.ok((r.latency_ms.ttft.p50_ms ?? Infinity) < (r.latency_ms.e2e.p50_ms ?? 0));
    assert.deepEqual(
      r.nodes.map((n) => n.speed_factor),
      [1, 2],
    );
    assert.equal(
      r.nodes.reduce((s, n) => s + n.served, 0),
      r.requests.ok,
      'served counts read from /metrics',
    );
    assert.ok((r.prefix_cache.hit_rate ?? 0) > 0.5);
  });

  it('lets open-loop latency grow when arrivals outpace a one-slot node', async () => {
    // One slot, 10 output tokens at 1 ms a step plus 1 ms of prefill: about 90 requests/s of
    // capacity, offered 150/s. A closed loop would slow down instead; the open loop keeps sending
    // and measures from the intended send time, so the queue shows up as latency.
    const file = await scenario(
      'queue',
      `name: queue\nduration_s: 1.6\ndrain_s: 10\nload: { mode: open, rate: 150 }\n` +
        'fleet: { nodes: 1, profile: fast, profile_overrides: { max_running: 1, decode_base_ms: 1 } }\n' +
        'workload:\n  mix:\n    - { kind: chat, stream: false, user_tokens: 10, output_tokens: 10 }\n',
    );
    const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
    assert.equal(run.code, 0, run.stderr.join('\n'));
    const r = await result('queue-default');
    assert.equal(r.requests.errors, 0);
    const [first, second] = r.timeline;
    assert.ok(first !== undefined && second !== undefined);
    assert.ok(
      (second.e2e_p50_ms ?? 0) > 1.5 * (first.e2e_p50_ms ?? Infinity),
      `p50 ${first.e2e_p50_ms} then ${second.e2e_p50_ms}`,
    );
    assert.ok((r.latency_ms.e2e.max_ms ?? 0) > 300, `max ${r.latency_ms.e2e.max_ms}`);
    assert.ok((r.nodes[0]?.utilisation ?? 0) > 0.8);
  });

  it('stops sending at max_requests long before duration_s, open and closed loop', async () => {
    const started = performance.now();
    const file = await scenario(
      'capped',
      'name: capped\nduration_s: 60\nmax_requests: 12\nload: { mode: open, rate: 200 }\n' +
        'fleet: { nodes: 1, profile: fast }\nworkload:\n  mix: [{ kind: embedding }]\n' +
        'variants:\n  - name: open\n  - name: closed\n    load: { mode: closed, connections: 2 }\n',
    );
    const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
    assert.equal(run.code, 0, run.stderr.join('\n'));
    for (const variant of ['open', 'closed']) {
      const r = await result(`capped-${variant}`);
      assert.equal(r.requests.total, 12, `${variant}: ${JSON.stringify(r.requests)}`);
      assert.equal(r.requests.ok, 12, variant);
      assert.ok(r.duration_s < 5, `${variant} sent for ${r.duration_s} s`);
    }
    assert.ok(performance.now() - started < 20_000, 'the run must end by itself, not after duration_s');
  });

  it('ends with a clear message when the target refuses connections', async () => {
    const port = await refusedPort();
    const file = await scenario(
      'refused',
      `name: refused\nload: { mode: closed }\ntarget: http://127.0.0.1:${port}\nworkload:\n  mix: [{ kind: embedding }]\n`,
    );
    const run = await cli([file, '--out', join(dir, 'out')]);
    assert.equal(run.code, 1);
    const text = run.stderr.join('\n');
    assert.match(
      text,
      new RegExp(`http://127\\.0\\.0\\.1:${port} refused the connection \\(ECONNREFUSED\\)`),
    );
    assert.doesNotMatch(text, /\n\s+at /);
    assert.equal(existsSync(join(dir, 'out', 'refused-default.json')), false);
  });

  it('checks the results directory before the run, not after it', async () => {
    const port = await refusedPort();
    const file = await scenario(
      'no-out',
      `name: no-out\nload: { mode: closed }\ntarget: http://127.0.0.1:${port}\nworkload:\n  mix: [{ kind: embedding }]\n`,
    );
    // A regular file where the directory should be: nothing can be written below it.
    const blocked = join(dir, 'a-file');
    await writeFile(blocked, 'x');
    const run = await cli([file, '--out', join(blocked, 'out')]);
    assert.equal(run.code, 1);
    const text = run.stderr.join('\n');
    assert.match(text, /cannot write results to .*a-file\/out/);
    assert.doesNotMatch(text, /refused the connection/, 'the run started before the check');
  });

  it('warns about a node_metrics URL it cannot read, and says so in the report', async () => {
    const fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    try {
      const dead = `http://127.0.0.1:${await refusedPort()}`;
      const file = await scenario(
        'metrics-gone',
        `name: metrics-gone\nduration_s: 1\nload: { mode: closed, connections: 2 }\ntarget: ${fleet.urls[0]!}\nnode_metrics: [${dead}]\nworkload:\n  mix: [{ kind: embedding }]\n`,
      );
      const run = await cli([file, '--out', join(dir, 'out'), '--quiet']);
      assert.equal(run.code, 0, run.stderr.join('\n'));
      assert.ok(
        run.stderr.some((l) => l.startsWith(`node_metrics ${dead}: cannot read /metrics (`)),
        run.stderr.join('\n'),
      );
      assert.ok(run.stdout.some((l) => l.includes('no node_metrics that could be read')));
    } finally {
      await fleet.close();
    }
  });

  it('rejects an invalid scenario with file:line:col before starting anything', async () => {
    const file = await scenario(
      'invalid',
      'name: invalid\nload: { mode: open, rate: 5 }\ntarget: http://8.8.8.8:80\nworkload:\n  mix: [{ kind: chat }]\n',
    );
    const run = await cli([file]);
    assert.equal(run.code, 2);
    assert.ok(
      run.stderr.some((l) => l.includes(`${file}:3:9 target: 8.8.8.8 is not a loopback address`)),
      run.stderr.join('\n'),
    );
  });

  it('rejects bad arguments and files that are not results', async () => {
    assert.equal((await cli([])).code, 2);
    assert.equal((await cli(['x.yaml', '--duration', '0'])).code, 2);
    const twice = await cli(['x.yaml', '--variant', 'a', '--variant', 'b']);
    assert.equal(twice.code, 2);
    assert.match(twice.stderr.join('\n'), /--variant may be given once/);
    const notResult = join(dir, 'not-result.json');
    await writeFile(notResult, '{"hello": 1}');
    const run = await cli(['compare', notResult, notResult]);
    assert.equal(run.code, 2);
    assert.match(run.stderr.join('\n'), /is not a loadtest result/);
    // The right format field, but not the rest of a result: a message and exit 2, no stack trace.
    const partial = join(dir, 'partial-result.json');
    await writeFile(partial, JSON.stringify({ format: 'sluice-loadtest-result/1', variant: 'x' }));
    const incomplete = await cli(['compare', partial, partial]);
    assert.equal(incomplete.code, 2);
    assert.match(incomplete.stderr.join('\n'), /is not a complete loadtest result: "requests" is missing/);
  });

  it('keeps running and writes its files when stdout is closed, and stops cleanly on SIGTERM', async () => {
    const file = await scenario(
      'signals',
      'name: signals\nseed: 1\nduration_s: 30\ndrain_s: 2\nload: { mode: open, rate: 20 }\nfleet: { nodes: 1, profile: fast }\nworkload:\n  mix: [{ kind: embedding }]\n',
    );
    const out = join(dir, 'signals-out');
    const p = runSluice(['loadtest', file, '--out', out, '--quiet']);
    try {
      // The reader goes away at once (as `| head` does once it has its lines).
      p.child.stdout!.destroy();
      await new Promise((res) => setTimeout(res, 3000));
      p.child.kill('SIGTERM');
      const code = await exitWithin(p, 20_000);
      const stderr = p.out();
      assert.equal(code, 0, stderr);
      assert.match(stderr, /interrupted; finishing requests in flight/);
      assert.doesNotMatch(stderr, /EPIPE|\n\s+at /);
    } finally {
      p.child.kill('SIGKILL');
    }
    assert.ok(existsSync(join(out, 'signals-default.json')), 'the result file was written');
  });

  it('writes its files when both stdout and stderr are closed', async () => {
    const file = await scenario(
      'no-readers',
      'name: no-readers\nseed: 1\nduration_s: 1\ndrain_s: 2\nload: { mode: open, rate: 20 }\nfleet: { nodes: 1, profile: fast }\nworkload:\n  mix: [{ kind: embedding }]\n',
    );
    const out = join(dir, 'no-readers-out');
    const p = runSluice(['loadtest', file, '--out', out]);
    try {
      p.child.stdout!.destroy();
      p.child.stderr!.destroy();
      assert.equal(await exitWithin(p, 30_000), 0);
      assert.ok(existsSync(join(out, 'no-readers-default.json')), 'the result file was written');
    } finally {
      p.child.kill('SIGKILL');
    }
  });
});
