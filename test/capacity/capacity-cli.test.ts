/**
 * `sluice capacity` as a real process: the recommendation and its formula from arguments, JSON
 * output, exit code 2 with a message for bad arguments, and per-pool figures read from a running
 * Sluice's admin API.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { recommendNodes } from '../../proxy/capacity/capacity-model.js';
import type { CapacityView } from '../../proxy/capacity/capacity-view.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const bin = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bin', 'sluice.js');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function sluice(args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, 'capacity', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('sluice capacity from arguments', () => {
  it('prints the inputs, the formula with numbers and the recommendation', async () => {
    const r = await sluice([
      '--items-per-second',
      '40',
      '--time-per-item-ms',
      '100',
      '--batch-size',
      '4',
      '--utilisation',
      '0.5',
      '--nodes',
      '3',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /items per second\s+40\s+--items-per-second/);
    assert.match(r.stdout, /time per item\s+100 ms\s+--time-per-item-ms/);
    assert.match(r.stdout, /batch size\s+4 items\s+--batch-size/);
    assert.match(r.stdout, /target utilisation\s+0\.5\s+--utilisation/);
    assert.match(r.stdout, /^nodes = ceil\(40 items\/s × 0\.1 s ÷ 4 items ÷ 0\.5\) = ceil\(2\) = 2$/m);
    assert.match(r.stdout, /^utilisation of the 3 nodes now: 0\.333$/m);
    assert.match(r.stdout, /^recommended nodes: 2$/m);
  });

  it('uses the default target utilisation of 0.7 and says so', async () => {
    const r = await sluice(['--items-per-second=100', '--time-per-item-ms=250', '--batch-size=8']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /target utilisation\s+0\.7\s+default/);
    assert.match(r.stdout, /^recommended nodes: 5$/m);
  });

  it('prints JSON with every input and its source', async () => {
    const r = await sluice([
      '--items-per-second',
      '60',
      '--time-per-item-ms',
      '100',
      '--batch-size',
      '2',
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const body = JSON.parse(r.stdout) as {
      recommended_nodes: number;
      busy_nodes: number;
      inputs: Record<string, { value: number | null; source: string }>;
      formula: string;
    };
    assert.equal(body.recommended_nodes, 5);
    assert.equal(body.busy_nodes, 3);
    assert.deepEqual(body.inputs['items_per_second'], { value: 60, source: '--items-per-second' });
    assert.deepEqual(body.inputs['target_utilisation'], { value: 0.7, source: 'default' });
    assert.match(body.formula, /= 5$/);
  });

  const bad: [string, string[], RegExp][] = [
    ['a missing input', ['--items-per-second', '40', '--batch-size', '4'], /give --items-per-second/],
    ['a value that is not a number', ['--items-per-second', 'lots'], /--items-per-second needs a number/],
    ['a flag without its value', ['--batch-size'], /--batch-size needs a value/],
    [
      'a utilisation above 1',
      ['--items-per-second', '1', '--time-per-item-ms', '1', '--batch-size', '1', '--utilisation', '1.5'],
      /--utilisation must be in \(0, 1\]/,
    ],
    [
      'a batch size of 0',
      ['--items-per-second', '1', '--time-per-item-ms', '1', '--batch-size', '0'],
      /batch size must be > 0/,
    ],
    ['an unknown option', ['--gpus', '3'], /unknown option --gpus/],
    ['--pool without --admin', ['--pool', 'gpu'], /--pool needs --admin/],
    [
      '--admin mixed with inputs',
      ['--admin', 'http://127.0.0.1:9901', '--batch-size', '4'],
      /--admin reads the inputs from Sluice/,
    ],
    ['an --admin that is not a URL', ['--admin', 'localhost'], /--admin needs a URL/],
  ];
  for (const [what, args, message] of bad) {
    it(`exits 2 with a message and the usage on ${what}`, async () => {
      const r = await sluice(args);
      assert.equal(r.code, 2);
      assert.match(r.stderr, message);
      assert.match(r.stderr, /usage: sluice capacity/);
      assert.equal(r.stdout, '');
    });
  }

  it('prints the usage and exits 0 on --help', async () => {
    const r = await sluice(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /nodes = ceil\(items\/s × time per item ÷ batch size ÷ target utilisation\)/);
  });
});

describe('sluice capacity --admin', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(
      basicConfig(fleet.urls, '').replace(
        '  - name: gpu\n',
        '  - name: gpu\n    capacity: { window_ms: 60000, target_utilisation: 0.6 }\n',
      ),
    );
    // Traffic the window will hold for a minute: 20 requests of 50 ms each, 4 at a time.
    for (let round = 0; round < 5; round++) {
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          const r = await fetch(`${t.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-sim-stall-ms': '50' },
            body: JSON.stringify({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
          });
          await r.arrayBuffer();
        }),
      );
    }
    await waitFor(
      async () => {
        const view = (await (await fetch(`${t.adminUrl}/admin/capacity`)).json()) as CapacityView;
        return (view.pools[0]?.inputs.time_per_item_ms.value ?? null) !== null;
      },
      10_000,
      'a capacity report with the traffic in it',
    );
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('prints each pool with its observed inputs, their sources and the recommendation', async () => {
    const r = await sluice(['--admin', t.adminUrl]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /^nodes = ceil\(items_per_second × time_per_item ÷ batch_size ÷ target_utilisation\)$/m,
    );
    assert.match(
      r.stdout,
      /^pool gpu: 2 nodes configured, 2 available; observed over .+ s \(window 60 s\)$/m,
    );
    assert.match(r.stdout, /items per second\s+[\d.]+\s+observed: /);
    assert.match(r.stdout, /time per item\s+[\d.]+ ms\s+observed: .*Little's law/);
    assert.match(
      r.stdout,
      /batch size\s+[\d.]+ items\s+1 items\/call \(observed\) × [\d.]+ calls\/node \(observed: /,
    );
    assert.match(r.stdout, /target utilisation\s+0\.6\s+config: capacity\.target_utilisation/);
    assert.match(r.stdout, /^ {2}nodes = ceil\(.+ ÷ 0\.6\) = ceil\(.+\) = \d+$/m);
    assert.match(r.stdout, /^ {2}recommended nodes: \d+$/m);
  });

  it('recomputes with --utilisation and prints JSON whose figures follow the formula', async () => {
    const r = await sluice(['--admin', t.adminUrl, '--pool', 'gpu', '--utilisation', '0.25', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const view = JSON.parse(r.stdout) as CapacityView;
    assert.equal(view.pools.length, 1);
    const p = view.pools[0]!;
    assert.deepEqual(p.inputs.target_utilisation, { value: 0.25, source: '--utilisation' });
    const items = p.inputs.items_per_second.value!;
    assert.ok(items > 0);
    const expected = recommendNodes({
      itemsPerSecond: items,
      timePerItemMs: p.inputs.time_per_item_ms.value!,
      batchSize: p.inputs.batch_size.value!,
      targetUtilisation: 0.25,
    }).nodes;
    assert.equal(p.recommended_nodes, expected);
    assert.match(p.formula ?? '', /÷ 0\.25\) = /);
  });

  it('exits 2 naming the pools when --pool names none of them', async () => {
    const r = await sluice(['--admin', t.adminUrl, '--pool', 'nope']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /no pool "nope" in .*\(pools: gpu\)/);
  });

  it('exits 1 when the admin API cannot be reached', async () => {
    // A listener that drops every connection: a port closed after use could be taken by another
    // test's server before the command connects (seen once in a clean-clone run).
    const s = createServer((socket) => socket.destroy());
    const port = await new Promise<number>((resolve) => {
      s.listen(0, '127.0.0.1', () => resolve((s.address() as { port: number }).port));
    });
    try {
      const r = await sluice(['--admin', `http://127.0.0.1:${port}`]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /sluice capacity: cannot read http:\/\/127\.0\.0\.1:\d+\/admin\/capacity/);
    } finally {
      await new Promise<void>((resolve) => s.close(() => resolve()));
    }
  });
});
