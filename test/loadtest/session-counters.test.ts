/**
 * The result's session counters cover the measured phase only: the request source also serves the
 * warm-up, whose sessions must not be counted.
 */

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runLoadtestCli } from '../../loadtest/cli.js';
import type { LoadtestResult } from '../../loadtest/report/result.js';

let dir = '';

describe('session counters', { timeout: 30_000 }, () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-session-counters-'));
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('count the sessions of the measured phase, not those of the warm-up', async () => {
    // Single-turn sessions: one session per request of the measured phase, after a warm-up that
    // starts as many again.
    const file = join(dir, 'sessions.yaml');
    await writeFile(
      file,
      'name: sessions\nseed: 1\nwarmup_s: 1\nduration_s: 1\ndrain_s: 5\nload: { mode: open, rate: 40 }\n' +
        'fleet: { nodes: 1, profile: fast }\n' +
        'workload:\n  mix:\n    - { kind: chat, stream: false, turns: 1, user_tokens: 10, output_tokens: 4 }\n',
    );
    const stderr: string[] = [];
    const code = await runLoadtestCli([file, '--out', dir, '--quiet'], {
      stdout: () => undefined,
      stderr: (l) => stderr.push(l),
      signal: new AbortController().signal,
    });
    assert.equal(code, 0, stderr.join('\n'));
    const r = JSON.parse(await readFile(join(dir, 'sessions-default.json'), 'utf8')) as LoadtestResult;
    assert.ok(r.requests.total >= 30, JSON.stringify(r.requests));
    assert.equal(r.sessions.started, r.requests.total);
    assert.equal(r.sessions.overflows, 0);
  });
});
