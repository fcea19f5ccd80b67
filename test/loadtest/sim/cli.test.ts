/**
 * `sluice sim`: argument errors give exit code 2 and a clear message; a good command line starts
 * the nodes, prints where they listen, and stops cleanly with exit code 0.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseSimArgs, runSimCli } from '../../../loadtest/sim/cli.js';
import { pollUntil } from './sim-test-helpers.js';

async function run(
  argv: string[],
  signal?: AbortSignal,
): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSimCli(argv, { stdout: (l) => out.push(l), stderr: (l) => err.push(l), signal });
  return { code, out, err };
}

describe('sluice sim CLI', () => {
  it('rejects bad arguments with exit code 2 and a message naming the problem', async () => {
    const cases: [string[], RegExp][] = [
      [['--nodes', '0'], /--nodes must be an integer/],
      [['--nodes', 'two'], /--nodes must be an integer/],
      [['--port', '70000'], /--port must be an integer/],
      [['--nodes'], /--nodes needs a value/],
      [['--frobnicate'], /unknown option --frobnicate/],
      [['extra'], /unexpected argument "extra"/],
      [['--nodes', '2', '--speed', '1,2,3'], /--speed has 3 values for 2 nodes/],
      [['--speed', '1,-2'], /--speed must be a comma-separated list of positive numbers/],
      [['--port', '65535', '--nodes', '2'], /leaves no room/],
      [['--profile', 'no-such-profile', '--port', '0'], /unknown profile "no-such-profile"/],
    ];
    for (const [argv, message] of cases) {
      const { code, err, out } = await run(argv);
      assert.equal(code, 2, argv.join(' '));
      assert.match(err.join('\n'), message, argv.join(' '));
      assert.deepEqual(out, []);
    }
  });

  it('parses both --flag value and --flag=value, and spreads one speed to every node', () => {
    const args = parseSimArgs([
      '--nodes=3',
      '--port',
      '0',
      '--host=127.0.0.1',
      '--profile',
      'fast',
      '--speed',
      '2',
    ]);
    assert.deepEqual(args, {
      nodes: 3,
      port: 0,
      host: '127.0.0.1',
      profile: 'fast',
      speedFactors: [2, 2, 2],
      help: false,
    });
  });

  it('prints usage for --help and exits 0', async () => {
    const { code, out } = await run(['--help']);
    assert.equal(code, 0);
    assert.match(out.join('\n'), /usage: sluice sim/);
  });

  it('starts the nodes, prints one line per node, serves, and stops cleanly on signal', async () => {
    const stop = new AbortController();
    const out: string[] = [];
    const done = runSimCli(['sim', '--nodes', '2', '--port', '0', '--profile', 'fast', '--speed', '1,2'], {
      stdout: (l) => out.push(l),
      stderr: () => undefined,
      signal: stop.signal,
    });
    await pollUntil('both nodes to be listed', () => out.length === 2);
    const urls = out.map((line, i) => {
      const m = new RegExp(`^node ${i} listening on (http://127\\.0\\.0\\.1:\\d+)$`).exec(line);
      assert.ok(m, line);
      return m[1] as string;
    });
    for (const url of urls) assert.equal((await fetch(`${url}/health`)).status, 200);
    stop.abort();
    assert.equal(await done, 0);
    await assert.rejects(fetch(`${urls[0] as string}/health`));
  });
});
