/**
 * Runs a scenario written as YAML text through `runLoadtestCli` (quiet, into `dir`) and returns its
 * one variant's result, for tests of what the result reports. Test support only.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runLoadtestCli } from '../../loadtest/cli.js';
import type { LoadtestResult } from '../../loadtest/report/result.js';

/** Writes `yaml` as `<name>.yaml` in `dir`, runs it (exit code 0 asserted), reads `<name>-default.json`. */
export async function runScenarioText(dir: string, name: string, yaml: string): Promise<LoadtestResult> {
  const file = join(dir, `${name}.yaml`);
  await writeFile(file, yaml);
  const stderr: string[] = [];
  const code = await runLoadtestCli([file, '--out', dir, '--quiet'], {
    stdout: () => undefined,
    stderr: (l) => stderr.push(l),
    signal: new AbortController().signal,
  });
  assert.equal(code, 0, stderr.join('\n'));
  return JSON.parse(await readFile(join(dir, `${name}-default.json`), 'utf8')) as LoadtestResult;
}
