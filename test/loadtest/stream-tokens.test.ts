/**
 * Streamed tokens/s counts the tokens that arrived while sending went on, per second of it: a run
 * whose streams mostly finish during the drain must not report more tokens per second than its
 * one-slot node can generate.
 */

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runScenarioText } from '../helpers/loadtest-run.js';

let dir = '';

describe('streamed tokens per second', { timeout: 30_000 }, () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-stream-tokens-'));
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('leaves out tokens of the drain, so the rate stays within what the node can generate', async () => {
    // One slot, a 10 ms decode step: at most 100 tokens/s. Ten 20-token streams are sent in the
    // first second and take about 2 s to generate, so half of their tokens arrive in the drain.
    const r = await runScenarioText(
      dir,
      'tokens',
      'name: tokens\nseed: 1\nduration_s: 1\ndrain_s: 10\nload: { mode: open, rate: 10 }\n' +
        'fleet: { nodes: 1, profile: fast, profile_overrides: { max_running: 1, decode_base_ms: 10 } }\n' +
        'workload:\n  mix:\n    - { kind: chat, user_tokens: 10, output_tokens: 20 }\n',
    );
    assert.equal(r.requests.ok, 10, JSON.stringify(r.errors));
    const generated = r.nodes[0]?.generation_tokens ?? 0;
    assert.equal(generated, 200);
    const rate = r.requests.stream_tokens_per_s;
    assert.ok(rate > 50, `streamed ${rate} tokens/s`);
    assert.ok(rate <= 110, `streamed ${rate} tokens/s from a node that makes at most 100/s`);
    assert.ok(rate * r.duration_s < generated * 0.75, 'the drain-time tokens are not counted');
  });
});
