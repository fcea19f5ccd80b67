/**
 * The result's session counters cover the measured phase only: the request source also serves the
 * warm-up, whose sessions must not be counted.
 */

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runScenarioText } from '../helpers/loadtest-run.js';

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
    const r = await runScenarioText(
      dir,
      'sessions',
      'name: sessions\nseed: 1\nwarmup_s: 1\nduration_s: 1\ndrain_s: 5\nload: { mode: open, rate: 40 }\n' +
        'fleet: { nodes: 1, profile: fast }\n' +
        'workload:\n  mix:\n    - { kind: chat, stream: false, turns: 1, user_tokens: 10, output_tokens: 4 }\n',
    );
    assert.ok(r.requests.total >= 30, JSON.stringify(r.requests));
    assert.equal(r.sessions.started, r.requests.total);
    assert.equal(r.sessions.overflows, 0);
  });
});
