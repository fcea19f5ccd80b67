/**
 * Ctrl-C during the warm-up: nothing was measured, so nothing is reported or written (an earlier
 * result of the same name stays) and the run fails; variants measured before it are still reported.
 */

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runLoadtestCli } from '../../loadtest/cli.js';

let dir = '';

interface Run {
  code: number;
  stdout: string[];
  stderr: string[];
}

/** Runs the CLI on `text` and aborts it once a stderr line matches `abortOn`. */
async function runUntil(name: string, text: string, abortOn: RegExp): Promise<Run> {
  const file = join(dir, `${name}.yaml`);
  await writeFile(file, text);
  const controller = new AbortController();
  const run: Run = { code: -1, stdout: [], stderr: [] };
  run.code = await runLoadtestCli([file, '--out', join(dir, 'out')], {
    stdout: (l) => run.stdout.push(l),
    stderr: (l) => {
      run.stderr.push(l);
      if (abortOn.test(l)) controller.abort();
    },
    signal: controller.signal,
  });
  return run;
}

const LOAD =
  'seed: 1\ndrain_s: 2\nload: { mode: open, rate: 20 }\nfleet: { nodes: 1, profile: fast }\n' +
  'workload:\n  mix: [{ kind: embedding }]\n';

describe('interrupted during the warm-up', { timeout: 30_000 }, () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-warmup-interrupt-'));
    await mkdir(join(dir, 'out'));
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('writes no result, keeps the earlier one and exits 1', async () => {
    const earlier = join(dir, 'out', 'warm-default.json');
    await writeFile(earlier, '{"earlier": true}');
    const run = await runUntil(
      'warm',
      `name: warm\nwarmup_s: 5\nduration_s: 2\n${LOAD}`,
      /^\[warm\/default warm-up\]/,
    );
    assert.equal(run.code, 1, run.stderr.join('\n'));
    assert.match(run.stderr.join('\n'), /warm\/default: interrupted during warm-up; nothing measured/);
    assert.doesNotMatch(run.stdout.join('\n'), /requests:/);
    assert.equal(await readFile(earlier, 'utf8'), '{"earlier": true}');
    for (const ext of ['.hgrm', '.svg'])
      assert.equal(existsSync(join(dir, 'out', `warm-default${ext}`)), false);
  });

  it('still reports and writes the variants measured before it', async () => {
    const run = await runUntil(
      'two',
      `name: two\nwarmup_s: 2\nduration_s: 0.5\n${LOAD}variants:\n  - name: a\n  - name: b\n`,
      /^\[two\/b warm-up\]/,
    );
    assert.equal(run.code, 0, run.stderr.join('\n'));
    assert.match(run.stderr.join('\n'), /two\/b: interrupted during warm-up; nothing measured/);
    assert.match(run.stdout.join('\n'), /^two \/ a: /m);
    assert.ok(existsSync(join(dir, 'out', 'two-a.json')));
    assert.equal(existsSync(join(dir, 'out', 'two-b.json')), false);
  });
});
