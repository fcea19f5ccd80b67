/**
 * A rejected reload changes nothing: a config that fails a check made while compiling (a
 * `request_headers` variable that is not set, a hash ring over its size limit) used to reconfigure
 * admission, tenants' limits, the nodes' in-flight caps and health before it failed, and restoring
 * the old file then reloaded as `unchanged` with the damage left in place.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const KEY = 'reload-rejected-tenant-key';

function config(fleet: SimFleet, opts: { tight: boolean; poison: string }): string {
  const perNode = opts.tight ? 1 : 64;
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}
${opts.tight ? '      - url: http://127.0.0.1:9\n' : ''}    max_in_flight_per_node: ${opts.tight ? 1 : 0}
    admission: { max_in_flight_per_node: ${perNode}, max_queue: ${opts.tight ? 1 : 100} }
${opts.tight ? '    health: { active: { path: /health, interval_ms: 100 } }\n' : ''}${opts.poison}
routes:
  - name: all
    match: {}
    pool: gpu
tenants:
  - name: acme
    keys: [{ env: SLUICE_TEST_RELOAD_REJECTED_KEY }]
    limits: { requests_per_minute: ${opts.tight ? 1 : 1000} }
`;
}

const UNSET_HEADER = '    request_headers: { authorization: "Bearer ${env:SLUICE_TEST_NEVER_SET_VARIABLE}" }';
const HUGE_RING = `    balance: { kind: consistent-hash, points_per_weight: 10000, affinity: { source: header, name: x-session-id } }
  - name: ring
    balance: { kind: consistent-hash, points_per_weight: 10000 }
    nodes:
      - { url: http://127.0.0.1:9, weight: 100 }`;

async function metric(t: TestSluice, pattern: RegExp): Promise<string | undefined> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  return pattern.exec(text)?.[1];
}

describe('a rejected reload', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    process.env['SLUICE_TEST_RELOAD_REJECTED_KEY'] = KEY;
    delete process.env['SLUICE_TEST_NEVER_SET_VARIABLE'];
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet, { tight: false, poison: '' }));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  for (const [what, poison] of [
    ['an unset request_headers variable', UNSET_HEADER],
    ['a hash ring over its size limit', HUGE_RING],
  ] as const) {
    it(`for ${what} leaves admission, limits, nodes and health as they were`, async () => {
      const limitBefore = await metric(t!, /sluice_admission_limit\{pool="gpu"\} (\d+)/);
      assert.equal(limitBefore, '128');
      await writeFile(t!.configPath, config(fleet!, { tight: true, poison }));
      const r = await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' });
      const body = (await r.json()) as { result: string; errors: string[] };
      assert.equal(body.result, 'rejected', JSON.stringify(body));
      assert.match(
        body.errors.join('\n'),
        poison === UNSET_HEADER ? /SLUICE_TEST_NEVER_SET_VARIABLE/ : /points/,
      );
      assert.equal(await metric(t!, /sluice_admission_limit\{pool="gpu"\} (\d+)/), '128');
      // No node of the rejected file appears, nor does its health check run.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const metrics = await (await fetch(`${t!.adminUrl}/metrics`)).text();
      assert.doesNotMatch(metrics, /127\.0\.0\.1:9"/);
      // Ten concurrent requests and a burst of the tenant's: served as before (per-node cap, queue
      // of 1 and 1 request a minute would refuse most of them).
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          fetch(`${t!.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
            body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
          }).then(async (res) => {
            await res.text();
            return res.status;
          }),
        ),
      );
      assert.deepEqual(
        answers,
        Array.from({ length: 10 }, () => 200),
      );
      const nodes = (await (await fetch(`${t!.adminUrl}/admin/nodes`)).json()) as { nodes: unknown[] }[];
      assert.equal(nodes[0]!.nodes.length, 2);
      // The old file again is "unchanged", and serves as it always did.
      await writeFile(t!.configPath, config(fleet!, { tight: false, poison: '' }));
      const back = (await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as {
        result: string;
      };
      assert.equal(back.result, 'unchanged');
    });
  }
});
