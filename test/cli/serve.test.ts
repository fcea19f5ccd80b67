/**
 * `sluice serve` as a real process: it prints where to send traffic, reloads on SIGHUP, on SIGTERM
 * finishes in-flight requests, refuses new connections and exits 0, and it refuses to start on a
 * port another instance holds.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { freePort } from '../../loadtest/env/free-port.js';
import { basicConfig, startTestSluice, waitFor } from '../helpers/sluice.js';
import { exitWithin, runSluice as run } from '../helpers/sluice-cli.js';

describe('sluice serve', () => {
  let fleet: SimFleet;
  let dir: string;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    dir = await mkdtemp(join(tmpdir(), 'sluice-cli-'));
  });

  after(async () => {
    await fleet?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('prints the address, reloads on SIGHUP, drains on SIGTERM and exits 0', async () => {
    const config = join(dir, 'serve.yaml');
    await writeFile(config, basicConfig([fleet.urls[0]!]));
    const p = run(['serve', '--config', config, '--no-watch']);
    try {
      await waitFor(() => /admin API on http:\/\/127\.0\.0\.1:\d+/.test(p.out()), 10_000, 'startup lines');
      const port = Number(
        /listener public on 127\.0\.0\.1:(\d+): send OpenAI-style traffic to http:\/\/127\.0\.0\.1:\d+\/v1/.exec(
          p.out(),
        )?.[1],
      );
      const admin = Number(/admin API on http:\/\/127\.0\.0\.1:(\d+)/.exec(p.out())?.[1]);
      assert.ok(port > 0 && admin > 0);
      const url = `http://127.0.0.1:${port}`;

      const first = await fetch(`${url}/debug/echo`);
      assert.equal(first.status, 200);
      await first.arrayBuffer();

      // SIGHUP: the new config (a second node) becomes version 2.
      await writeFile(config, basicConfig([fleet.urls[0]!, fleet.urls[1]!]));
      p.child.kill('SIGHUP');
      await waitFor(
        async () => {
          const r = await fetch(`http://127.0.0.1:${admin}/admin/config`);
          return ((await r.json()) as { version: number }).version === 2;
        },
        5000,
        'reload to version 2',
      );

      // A slow stream is in flight when SIGTERM arrives: it must complete.
      const slow = fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '100' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'slow' }],
          max_tokens: 10,
          stream: true,
        }),
      });
      const res = await slow;
      assert.equal(res.status, 200);
      const body = res.text();
      p.child.kill('SIGTERM');
      await waitFor(() => /SIGTERM: draining 1 in-flight/.test(p.out()), 5000, 'drain start');
      // While the stream still runs, new connections are refused.
      const refused = await new Promise<string>((resolve) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          resolve('connected');
        });
        s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      });
      assert.equal(refused, 'ECONNREFUSED');
      const text = await body;
      assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'the in-flight stream finished');
      assert.ok(!text.includes('"error"'));
      assert.equal(await p.exit, 0);
      assert.match(p.out(), /drained; exiting/);
    } finally {
      p.child.kill('SIGKILL');
    }
  });

  it('exits 1 and names file:line:col when the config is invalid', async () => {
    const config = join(dir, 'bad.yaml');
    await writeFile(config, basicConfig([fleet.urls[0]!]).replace('pools:', 'pools:\n  - nme: typo'));
    const p = run(['serve', '--config', config]);
    assert.equal(await p.exit, 1);
    assert.match(p.out(), /bad\.yaml:\d+:\d+/);
  });

  it('exits 1 naming the listener when its port is held by another Sluice', async () => {
    // A configured port, not 0: uWS sets SO_REUSEPORT only on a socket bound to a given port.
    const port = await freePort();
    const first = await startTestSluice(basicConfig([fleet.urls[0]!]).replace('port: 0', `port: ${port}`));
    const config = join(dir, 'taken.yaml');
    await writeFile(config, basicConfig([fleet.urls[0]!]).replace('port: 0', `port: ${port}`));
    const p = run(['serve', '--config', config, '--no-watch']);
    try {
      assert.equal(await exitWithin(p, 10_000), 1, p.out());
      assert.match(
        p.out(),
        new RegExp(
          `listener public: cannot bind 127\\.0\\.0\\.1:${port} \\(address in use or not permitted\\)`,
        ),
      );
    } finally {
      p.child.kill('SIGKILL');
      await first.close();
    }
  });

  it('exits 2 with usage for an unknown command', async () => {
    const p = run(['frobnicate']);
    assert.equal(await p.exit, 2);
    assert.match(p.out(), /unknown command "frobnicate"/);
  });
});
