/**
 * Signals that reach `sluice serve` at awkward moments. During the drain a second SIGTERM (GNU
 * `timeout` signals the child and its process group, so two are common), a SIGINT or a SIGHUP is
 * logged and the drain runs to its end: the request in flight completes and the exit code is 0.
 * A SIGHUP during startup is held and reloads once Sluice serves. Without a handler, each of these
 * took Node's default action and killed the process at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, chatRequest, waitFor } from '../helpers/sluice.js';
import { exitWithin, runSluice, servePorts, type SluiceProc } from '../helpers/sluice-cli.js';

/** How long the request in flight during the drain takes at its node, ms. */
const STALL_MS = 1500;

/** Whether `pid` has a handler for SIGHUP (signal 1), read from /proc; null where /proc is missing. */
async function catchesHangup(pid: number): Promise<boolean | null> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(status)?.[1];
    return mask === undefined ? null : (BigInt(`0x${mask}`) & 1n) === 1n;
  } catch {
    return null;
  }
}

describe('sluice serve under repeated signals', { timeout: 90_000 }, () => {
  let fleet: SimFleet;
  let dir: string;
  let config: string;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    dir = await mkdtemp(join(tmpdir(), 'sluice-signals-'));
    config = join(dir, 'serve.yaml');
    await writeFile(config, basicConfig([fleet.urls[0]!]));
  });

  after(async () => {
    await fleet?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** Starts `sluice serve` and resolves once it serves, with its listener and admin URLs. */
  async function serve(): Promise<{ p: SluiceProc; url: string; admin: string }> {
    const p = runSluice(['serve', '--config', config, '--no-watch']);
    await waitFor(() => servePorts(p.out()).admin > 0, 15_000, 'startup lines');
    const { port, admin } = servePorts(p.out());
    return { p, url: `http://127.0.0.1:${port}`, admin: `http://127.0.0.1:${admin}` };
  }

  const cases: [NodeJS.Signals, NodeJS.Signals, RegExp][] = [
    ['SIGTERM', 'SIGTERM', /SIGTERM: already draining \(1 in flight, deadline in \d+ ms\)/],
    ['SIGTERM', 'SIGHUP', /SIGHUP: ignored while draining \(1 in flight, deadline in \d+ ms\)/],
    ['SIGINT', 'SIGINT', /SIGINT: already draining \(1 in flight, deadline in \d+ ms\)/],
  ];
  for (const [first, second, logged] of cases) {
    it(`${first} then ${second}: the second is logged, the request in flight completes and the exit code is 0`, async () => {
      const { p, url, admin } = await serve();
      try {
        const slow = fetch(
          `${url}/v1/chat/completions`,
          chatRequest({}, { 'x-sim-stall-ms': String(STALL_MS) }),
        );
        // Caught here, checked below: without its handler the process dies and the request fails.
        const answer = slow.then(
          async (r) => ({ status: r.status, body: await r.text() }),
          (e: unknown) => ({ status: 0, body: String(e) }),
        );
        await waitFor(
          async () => {
            const r = await fetch(`${admin}/admin/stats`);
            return ((await r.json()) as { in_flight: number }).in_flight === 1;
          },
          5000,
          'the request in flight',
        );
        p.child.kill(first);
        await waitFor(() => new RegExp(`${first}: draining 1 in-flight`).test(p.out()), 5000, 'drain start');
        p.child.kill(second);
        await waitFor(
          () => logged.test(p.out()) || p.child.exitCode !== null || p.child.signalCode !== null,
          5000,
          'the second signal logged',
        );
        const a = await answer;
        assert.equal(a.status, 200, a.body);
        assert.match(a.body, /"choices"/);
        assert.equal(await exitWithin(p, 10_000), 0, p.out());
        assert.match(p.out(), logged);
        assert.match(p.out(), /drained; exiting/);
      } finally {
        p.child.kill('SIGKILL');
      }
    });
  }

  it('SIGHUP during startup is held, does not kill the process, and reloads once Sluice serves', async (t) => {
    const p = runSluice(['serve', '--config', config, '--no-watch']);
    try {
      const pid = p.child.pid!;
      // Sent as soon as SIGHUP has a handler, while the modules still load (about half a second).
      let caught: boolean | null = false;
      await waitFor(
        async () => (caught = await catchesHangup(pid)) !== false || p.child.exitCode !== null,
        10_000,
        'a SIGHUP handler',
      );
      if (caught === null) {
        t.skip('no /proc/PID/status to see when the handler is in place');
        return;
      }
      assert.equal(servePorts(p.out()).admin, 0, 'the SIGHUP reaches the process while it starts');
      p.child.kill('SIGHUP');
      await waitFor(
        () => servePorts(p.out()).admin > 0 || p.child.exitCode !== null || p.child.signalCode !== null,
        15_000,
        'startup lines',
      );
      assert.equal(p.child.signalCode, null, p.out());
      await waitFor(
        () => /SIGHUP received during startup: reloading now/.test(p.out()),
        5000,
        'the held SIGHUP',
      );
      const { port } = servePorts(p.out());
      const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, chatRequest());
      assert.equal(r.status, 200);
      await r.arrayBuffer();
      p.child.kill('SIGTERM');
      assert.equal(await exitWithin(p, 10_000), 0, p.out());
    } finally {
      p.child.kill('SIGKILL');
    }
  });
});
