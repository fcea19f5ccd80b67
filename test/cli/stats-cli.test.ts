/**
 * `sluice stats`: merges the histograms of several running instances exactly (counts add up), prints
 * percentiles per route or node, writes an `.hgrm` percentile distribution, and rejects bad
 * arguments with exit 2.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { runStatsCli } from '../../proxy/cli/stats-cli.js';
import { exitWithin, runSluice } from '../helpers/sluice-cli.js';
import { basicConfig, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

function capture(): {
  out: string[];
  err: string[];
  io: { stdout(s: string): void; stderr(s: string): void };
} {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { stdout: (s) => out.push(s), stderr: (s) => err.push(s) } };
}

describe('sluice stats', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let a: TestSluice | undefined;
  let b: TestSluice | undefined;
  let dir = '';

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    a = await startTestSluice(basicConfig(fleet.urls));
    b = await startTestSluice(basicConfig(fleet.urls));
    for (const [t, n] of [
      [a, 3],
      [b, 5],
    ] as const)
      for (let i = 0; i < n; i++) await (await fetch(`${t.url}/v1/chat/completions`, chatRequest())).text();
    dir = await mkdtemp(join(tmpdir(), 'sluice-stats-'));
  });

  after(async () => {
    await a?.close();
    await b?.close();
    await fleet?.close();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('merges two instances: the route shows every request of both', async () => {
    const c = capture();
    assert.equal(
      await runStatsCli(['--admin', a!.adminUrl, '--admin', b!.adminUrl, '--view', 'total'], c.io),
      0,
    );
    const text = c.out.join('');
    assert.match(text, /^duration \(since start\), 2 instances$/m);
    assert.match(text, /^route\s+count\s+p50 ms\s+p90 ms\s+p99 ms\s+p99\.9 ms\s+max ms$/m);
    assert.match(text, /^all\s+8\s+[\d.]+/m);
  });

  it('groups by node and writes the merged distribution as .hgrm', async () => {
    const c = capture();
    const hgrm = join(dir, 'duration.hgrm');
    assert.equal(
      await runStatsCli(
        [a!.adminUrl, b!.adminUrl, '--by', 'node', '--json', '--hgrm', hgrm, '--view', 'total'],
        c.io,
      ),
      0,
    );
    const body = JSON.parse(c.out.join('')) as { unit: string; groups: { group: string; count: number }[] };
    assert.equal(body.unit, 'ms');
    assert.equal(body.groups.length, 2);
    assert.equal(
      body.groups.reduce((n, g) => n + g.count, 0),
      8,
    );
    const file = await readFile(hgrm, 'utf8');
    assert.match(file, /Value\s+Percentile\s+TotalCount/);
    assert.match(file, /#\[Mean\s+=/);
    assert.match(file, /#\[Max\s+=/);
  });

  it('exits 2 with the usage for a bad argument, and 1 for an instance it cannot read', async () => {
    const c = capture();
    assert.equal(await runStatsCli(['--metric', 'nope', '--admin', a!.adminUrl], c.io), 2);
    assert.match(c.err.join(''), /--metric must be one of/);
    const d = capture();
    assert.equal(await runStatsCli(['--admin', 'http://127.0.0.1:1'], d.io), 1);
    assert.match(d.err.join(''), /cannot read http:\/\/127\.0\.0\.1:1: fetch failed: bad port/);
  });

  it('exits 1 at once, naming the cause, when the admin address drops every connection (the command as a process)', async () => {
    // A process of its own: the test process has undici loaded for its other parts, and that
    // hides what the command's fetch does alone.
    const s = createServer((socket) => socket.destroy());
    const port = await new Promise<number>((resolve) => {
      s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port));
    });
    const p = runSluice(['stats', '--admin', `http://127.0.0.1:${port}`]);
    try {
      // Not the command's 10-s timeout: the dropped connection itself is the answer.
      assert.equal(await exitWithin(p, 5000), 1, p.out());
      // Closed before or after the request reached the server (a FIN, or a reset when the request's
      // bytes arrive at a socket already closed): which one is the kernel's timing.
      assert.match(
        p.out(),
        /cannot read http:\/\/127\.0\.0\.1:\d+: fetch failed: (UND_ERR_SOCKET \(other side closed\)|ECONNRESET \(read ECONNRESET\))/,
      );
    } finally {
      p.child.kill('SIGKILL');
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
  });

  it('exits 1 with one line when the .hgrm file cannot be written', async () => {
    const c = capture();
    assert.equal(await runStatsCli(['--admin', a!.adminUrl, '--hgrm', '/nonexistent-dir/out.hgrm'], c.io), 1);
    assert.match(c.err.join(''), /^sluice stats: cannot write \/nonexistent-dir\/out\.hgrm: ENOENT/);
  });

  it('says whether a 401 wants the token set or refused the one set', async () => {
    process.env['SLUICE_TEST_STATS_ADMIN_TOKEN'] = 'stats-admin-token';
    const yaml = basicConfig(fleet!.urls).replace(
      '  port: 0\npools:',
      '  port: 0\n  token: { env: SLUICE_TEST_STATS_ADMIN_TOKEN }\npools:',
    );
    assert.match(yaml, /SLUICE_TEST_STATS_ADMIN_TOKEN/);
    const guarded = await startTestSluice(yaml);
    const saved = process.env['SLUICE_ADMIN_TOKEN'];
    try {
      delete process.env['SLUICE_ADMIN_TOKEN'];
      const unset = capture();
      assert.equal(await runStatsCli(['--admin', guarded.adminUrl], unset.io), 1);
      assert.match(unset.err.join(''), /answered 401: [^]*set SLUICE_ADMIN_TOKEN to it/);
      process.env['SLUICE_ADMIN_TOKEN'] = 'not-the-token';
      const wrong = capture();
      assert.equal(await runStatsCli(['--admin', guarded.adminUrl], wrong.io), 1);
      assert.match(wrong.err.join(''), /answered 401: [^]*refused the token in SLUICE_ADMIN_TOKEN/);
      process.env['SLUICE_ADMIN_TOKEN'] = 'stats-admin-token';
      const right = capture();
      assert.equal(await runStatsCli(['--admin', guarded.adminUrl, '--view', 'total'], right.io), 0);
    } finally {
      if (saved === undefined) delete process.env['SLUICE_ADMIN_TOKEN'];
      else process.env['SLUICE_ADMIN_TOKEN'] = saved;
      await guarded.close();
    }
  });
});
