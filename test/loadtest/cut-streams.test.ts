/**
 * Streams cut by the drain (a 200 head, then `unfinished`) are failures but not error answers, and
 * their inter-token gaps stay out of the latency table: only complete successful streams count.
 */

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Outcome } from '../../loadtest/client/http-sender.js';
import { Recorder } from '../../loadtest/drive/recorder.js';
import { runScenarioText } from '../helpers/loadtest-run.js';
import type { PlannedRequest } from '../../loadtest/workload/planned-request.js';

let dir = '';

const PLAN: PlannedRequest = {
  kind: 'chat',
  tenant: 0,
  path: '/v1/chat/completions',
  headers: {},
  body: '{}',
  stream: true,
  session: null,
};

function outcome(status: number, error: string | null, gaps: number[]): Outcome {
  return {
    status,
    error,
    sentAt: 0,
    endAt: 40,
    firstTokenAt: 10,
    tokens: gaps.length + 1,
    gaps,
    reply: null,
  };
}

describe('streams cut short', { timeout: 30_000 }, () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-cut-streams-'));
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('records error answers for 4xx and 5xx only, and gaps for complete streams only', () => {
    const rec = new Recorder(1, 0);
    rec.record(PLAN, 0, outcome(200, null, [5, 5]));
    rec.record(PLAN, 0, outcome(200, 'unfinished', [7, 7, 7]));
    rec.record(PLAN, 0, outcome(200, 'stream_truncated', [9]));
    rec.record(PLAN, 0, outcome(503, 'http_503', []));
    rec.record(PLAN, 0, outcome(0, 'ECONNRESET', []));
    assert.equal(rec.errorE2e.totalCount, 1);
    assert.equal(rec.itl.totalCount, 2);
    assert.equal(rec.itl.maxValue, 5000);
    assert.equal(rec.failed, 4);
  });

  it('leaves streams the drain cut out of the error answers and the inter-token gaps', async () => {
    // One slot, 100 tokens at 5 ms a step: 0.5 s a stream. Four arrive in the first second; the
    // drain ends 0.3 s after it, cutting a stream midway and one still queued behind it (the fast
    // profile sends its 200 head at once).
    const r = await runScenarioText(
      dir,
      'cut',
      'name: cut\nseed: 1\nduration_s: 1\ndrain_s: 0.3\nload: { mode: open, rate: 4 }\n' +
        'fleet: { nodes: 1, profile: fast, profile_overrides: { max_running: 1, decode_base_ms: 5 } }\n' +
        'workload:\n  mix:\n    - { kind: chat, user_tokens: 10, output_tokens: 100 }\n',
    );
    assert.deepEqual(r.statuses, { '200': 4 });
    assert.ok(r.requests.ok >= 1 && (r.errors['unfinished'] ?? 0) >= 1, JSON.stringify(r.errors));
    assert.equal(r.requests.ok + (r.errors['unfinished'] ?? 0), 4);
    assert.equal(r.latency_ms.error_e2e?.count ?? 0, 0, 'no request was answered with an error status');
    assert.equal(r.latency_ms.itl.count, r.requests.ok * 99, '99 gaps per complete 100-token stream');
  });
});
