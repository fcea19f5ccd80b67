/**
 * Reload with plugins, through a real Sluice: new requests get the new plan's instances, a request
 * in flight finishes on the instances it started with (which are closed only after it), a plugin's
 * key-value state survives the reload, and a config with invalid plugin options is rejected whole
 * with file:line:col while the old plan keeps serving.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { chatRequest, LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN } from './plugin-helpers.js';

const COUNTER = join(findSluiceRoot(), 'examples', 'plugins', 'tenant-counter.mjs');

function config(node: string, label: string, delayMs: number, counterOptions = '{}'): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: probe
    use: ${PROBE_PLUGIN}
    options: { label: ${label}, head_delay_ms: ${delayMs} }
  - name: counter
    use: ${COUNTER}
    options: ${counterOptions}
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [probe, counter]
`;
}

function closed(): string[] {
  return (globalThis as { __probeClosed?: string[] }).__probeClosed ?? [];
}

describe('plugins across a reload', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls[0]!, 'v1', 600));
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  const reload = async (): Promise<{ status: number; body: { result: string; errors: string[] } }> => {
    const r = await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' });
    return { status: r.status, body: (await r.json()) as { result: string; errors: string[] } };
  };

  it('swaps instances for new requests while one in flight finishes on its own, then closes them', async () => {
    const first = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(first.headers.get('x-probe'), 'v1');
    assert.equal(first.headers.get('x-tenant-requests'), '1');
    await first.text();
    // Starts on v1; its head waits 600 ms in the v1 probe while the config changes.
    const inFlight = fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    await new Promise((r) => setTimeout(r, 100));
    await writeFile(t!.configPath, config(fleet!.urls[0]!, 'v2', 0));
    const rl = await reload();
    assert.equal(rl.body.result, 'applied');
    const after = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(after.headers.get('x-probe'), 'v2');
    await after.text();
    assert.ok(!closed().includes('probe:v1'), 'v1 stays open while its request runs');
    const old = await inFlight;
    assert.equal(old.status, 200);
    assert.equal(old.headers.get('x-probe'), 'v1');
    await old.text();
    // The counter's state lives in the key-value store: the count went on across the reload.
    assert.equal(old.headers.get('x-tenant-requests'), '2');
    assert.equal(after.headers.get('x-tenant-requests'), '3');
    const until = Date.now() + 2000;
    while (!closed().includes('probe:v1') && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    assert.ok(closed().includes('probe:v1'), 'v1 closed once its last request finished');
  });

  it('rejects a reload whose plugin options are invalid and keeps serving the old plan', async () => {
    await writeFile(t!.configPath, config(fleet!.urls[0]!, 'v3', 0, '{ header: "Bad Header" }'));
    const rl = await reload();
    assert.equal(rl.status, 422);
    assert.equal(rl.body.result, 'rejected');
    assert.match(
      rl.body.errors[0]!,
      /sluice\.yaml:\d+:\d+ plugins\[1\]\.options\.header: must match the pattern/,
    );
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.headers.get('x-probe'), 'v2');
    await r.text();
  });

  it('refuses a reload whose plugin create does not finish within create_timeout_ms, and the next reload applies', async () => {
    const slow = config(fleet!.urls[0]!, 'slow', 0).replace(
      'options: { label: slow, head_delay_ms: 0 }',
      'options: { label: slow, head_delay_ms: 0, create_delay_ms: 600 }\n    create_timeout_ms: 150',
    );
    assert.match(slow, /create_timeout_ms: 150/);
    await writeFile(t!.configPath, slow);
    const started = performance.now();
    const rl = await reload();
    assert.ok(performance.now() - started < 550, 'the reload waited for create');
    assert.equal(rl.status, 422);
    assert.match(
      rl.body.errors.join('\n'),
      /probe.*create did not finish within 150 ms \(create_timeout_ms\)/,
    );
    // The instance made after the refusal is closed, never used.
    await new Promise((r) => setTimeout(r, 600));
    assert.ok(closed().includes('probe:slow'), `closed: ${closed().join(', ')}`);
    await writeFile(t!.configPath, config(fleet!.urls[0]!, 'v4', 0));
    const next = await reload();
    assert.equal(next.body.result, 'applied', next.body.errors.join('\n'));
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.headers.get('x-probe'), 'v4');
    await r.text();
  });
});

describe('an operator reload with plugins and the same config text', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  const stamp = (value: string): string => `export default {
  name: 'stamp',
  version: '1.0.0',
  options: { $id: 'https://sluice.test/stamp-options', type: 'object', properties: { note: { type: 'string' } } },
  create() {
    return { onResponseHead(req) { req.setResponseHeader('x-stamp', '${value}'); } };
  },
};
`;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(
      `${LOOPBACK_HEAD}plugins:
  - name: stamp
    use: ./stamp.mjs
    options: { note: same }
pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]!}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [stamp]
`,
      { before: (dir) => writeFile(join(dir, 'stamp.mjs'), stamp('one')) },
    );
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('imports a changed plugin module again (its options schema has an $id) though the config did not change', async () => {
    const first = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(first.headers.get('x-stamp'), 'one');
    await first.text();
    await new Promise((r) => setTimeout(r, 20));
    await writeFile(join(dirname(t!.configPath), 'stamp.mjs'), stamp('two'));
    const r = await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' });
    const body = (await r.json()) as { result: string; errors: string[] };
    assert.equal(body.result, 'applied', body.errors.join('\n'));
    const second = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(second.headers.get('x-stamp'), 'two');
    await second.text();
  });
});
