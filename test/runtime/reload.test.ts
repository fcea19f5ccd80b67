/**
 * Hot reload: a valid edit applies within a second through the file watch, an invalid one is
 * rejected with file:line:col while the old config keeps serving, in-flight requests finish on the
 * plan they started with, and traffic sees zero failures across repeated reloads.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, startTestSluice, waitFor } from '../helpers/sluice.js';

const chat = (max = 4): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: max }),
});

async function served(fleet: SimFleet): Promise<number[]> {
  return fleet.nodes.map((n) => n.stats().served);
}

describe('config reload', () => {
  let fleet: SimFleet;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
  });

  after(async () => {
    await fleet?.close();
  });

  it('applies a valid edit within a second through the file watch', async () => {
    const [a, b] = fleet.urls as [string, string];
    const t = await startTestSluice(basicConfig([a]), { watch: true });
    try {
      const r = await fetch(`${t.url}/v1/chat/completions`, chat());
      assert.equal(r.status, 200);
      await r.arrayBuffer();
      const before = await served(fleet);
      const t0 = performance.now();
      await writeFile(t.configPath, basicConfig([b]));
      await waitFor(() => t.sluice.current.version === 2, 2000, 'version 2');
      const elapsed = performance.now() - t0;
      assert.ok(elapsed < 1000, `reload took ${elapsed.toFixed(0)} ms`);
      const r2 = await fetch(`${t.url}/v1/chat/completions`, chat());
      assert.equal(r2.status, 200);
      await r2.arrayBuffer();
      const afterServed = await served(fleet);
      assert.equal(afterServed[0], before[0], 'the removed node got nothing');
      assert.equal(afterServed[1], before[1]! + 1, 'the new node served the request');
    } finally {
      await t.close();
    }
  });

  it('rejects an invalid edit with file:line:col, in the log and the admin response, and keeps serving', async () => {
    const t = await startTestSluice(basicConfig([fleet.urls[0]!]));
    try {
      await writeFile(
        t.configPath,
        basicConfig([fleet.urls[1]!]).replace('    pool: gpu', '    pool: gpu\n    poool: typo'),
      );
      const res = await fetch(`${t.adminUrl}/admin/reload`, { method: 'POST' });
      assert.equal(res.status, 422);
      const body = (await res.json()) as { result: string; version: number; errors: string[] };
      assert.equal(body.result, 'rejected');
      assert.equal(body.version, 1);
      assert.equal(body.errors.length, 1);
      assert.match(body.errors[0]!, /sluice\.yaml:\d+:\d+ routes\[0\]\.poool: /);
      assert.ok(
        t.logs.some((l) => l.includes(body.errors[0]!)),
        'the same message is logged',
      );
      const cfg = (await (await fetch(`${t.adminUrl}/admin/config`)).json()) as { version: number };
      assert.equal(cfg.version, 1);
      const r = await fetch(`${t.url}/v1/chat/completions`, chat());
      assert.equal(r.status, 200, 'the previous config still serves');
      await r.arrayBuffer();
      const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
      assert.match(metrics, /sluice_config_reloads_total\{result="rejected"\} 1/);
    } finally {
      await t.close();
    }
  });

  it('rejects a reload that changes listeners, naming the reason', async () => {
    const t = await startTestSluice(basicConfig([fleet.urls[0]!]));
    try {
      await writeFile(
        t.configPath,
        basicConfig([fleet.urls[0]!]).replace(
          'address: 127.0.0.1\n    port: 0',
          'address: 127.0.0.2\n    port: 0',
        ),
      );
      const r = await t.sluice.reload();
      assert.equal(r.result, 'rejected');
      assert.match(r.errors[0]!, /restart/);
      assert.match(r.errors[0]!, /: listeners changed, which cannot change while running/);
      assert.equal(t.sluice.current.version, 1);
    } finally {
      await t.close();
    }
  });

  it('lets a request in flight finish on the config it started with', async () => {
    const [a, b] = fleet.urls as [string, string];
    const t = await startTestSluice(basicConfig([a]));
    try {
      const slow = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '30' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'slow' }],
          max_tokens: 10,
          stream: true,
        }),
      });
      assert.equal(slow.status, 200);
      await writeFile(t.configPath, basicConfig([b]));
      const r = await t.sluice.reload();
      assert.equal(r.result, 'applied');
      const oldNode = [...t.sluice.registry.all()].find((n) => n.id === a);
      assert.ok(oldNode !== undefined, 'the old node stays open while a request uses it');
      const text = await slow.text();
      assert.ok(text.trimEnd().endsWith('data: [DONE]'));
      assert.ok(!text.includes('"error"'));
      await waitFor(() => ![...t.sluice.registry.all()].some((n) => n.id === a), 2000, 'old node released');
    } finally {
      await t.close();
    }
  });

  it('drops no request across repeated reloads under concurrent traffic', async () => {
    const [a, b] = fleet.urls as [string, string];
    const configs = [basicConfig([a]), basicConfig([b]), basicConfig([a, b])];
    const t = await startTestSluice(configs[0]!);
    try {
      let stop = false;
      let ok = 0;
      const failures: string[] = [];
      const client = async (): Promise<void> => {
        while (!stop) {
          try {
            const r = await fetch(`${t.url}/v1/chat/completions`, chat(2));
            await r.arrayBuffer();
            if (r.status === 200) ok++;
            else failures.push(String(r.status));
          } catch (e) {
            failures.push(String(e));
          }
        }
      };
      const clients = Array.from({ length: 8 }, () => client());
      let reloads = 0;
      // Ten reloads (at least two seconds of traffic); bounded for a busy machine.
      const start = performance.now();
      const deadline = start + 15_000;
      while ((reloads < 10 || performance.now() < start + 2000) && performance.now() < deadline) {
        await writeFile(t.configPath, configs[(reloads + 1) % configs.length]!);
        const r = await t.sluice.reload();
        assert.equal(r.result, 'applied');
        reloads++;
        await new Promise((res) => setTimeout(res, 50));
      }
      stop = true;
      await Promise.all(clients);
      assert.deepEqual(failures, []);
      assert.ok(reloads >= 10, `only ${reloads} reloads`);
      assert.ok(ok > 100, `only ${ok} requests completed`);
    } finally {
      await t.close();
    }
  });

  it('answers a reload asked for during another with the result for the file as it was when asked', async () => {
    // A plugin whose module takes 600 ms to load makes the first reload slow.
    const slowPlugin = (dir: string): string => join(dir, 'slow-plugin.mjs');
    const t = await startTestSluice(basicConfig([fleet.urls[0]!]), {
      before: (dir) =>
        writeFile(
          slowPlugin(dir),
          `await new Promise((r) => setTimeout(r, 600));
export default { name: 'slow', version: '0.0.1', create() { return {}; } };
`,
        ),
    });
    try {
      const plugin = slowPlugin(dirname(t.configPath));
      await writeFile(
        t.configPath,
        basicConfig([fleet.urls[1]!], `plugins:\n  - name: slow\n    use: ${plugin}\n`),
      );
      const first = t.sluice.reload();
      await new Promise((r) => setTimeout(r, 100));
      // Written while the first reload still loads its plugin: this call must answer for it.
      await writeFile(t.configPath, basicConfig([fleet.urls[0]!]).replace('pool: gpu', 'pool: gpux'));
      const second = t.sluice.reload();
      const [a, b] = await Promise.all([first, second]);
      assert.equal(a.result, 'applied');
      assert.equal(b.result, 'rejected', JSON.stringify(b));
      assert.match(b.errors.join('\n'), /unknown pool "gpux"/);
      assert.equal(t.sluice.current.version, 2, 'the first file serves');
    } finally {
      await t.close();
    }
  });
});
