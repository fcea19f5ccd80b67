/**
 * A short reload-under-load run (the long one is `npm run chaos`): `sluice serve` takes steady
 * requests and reopening SSE streams while its config is reloaded every half second, alternating
 * a valid and an invalid file. No request or stream fails, every valid file is applied, every
 * invalid one rejected with the previous plan kept.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { reloadLoadProblems, runReloadUnderLoad } from '../../loadtest/chaos/reload-under-load.js';

describe('reload under load (short)', { timeout: 120_000 }, () => {
  it('fails no request or stream while valid and invalid files are reloaded twice a second', async (t) => {
    const r = await runReloadUnderLoad({ durationMs: 5000, rate: 200, streams: 20, reloadEveryMs: 500 });
    t.diagnostic(
      `${r.requests} requests (${r.requestsPerSecond}/s, p99 ${r.p99Ms} ms), ${r.streamsCompleted} streams, ${r.reloadsApplied} reloads applied, ${r.reloadsRejected} rejected, descriptors ${r.fds.join(' ')}`,
    );
    const problems = reloadLoadProblems(r).filter((p) => !p.startsWith('descriptors'));
    assert.deepEqual(problems, []);
    assert.ok(r.reloadsApplied >= 3 && r.reloadsRejected >= 3, 'several reloads of each kind');
    assert.ok(r.streamsCompleted >= 20, `only ${r.streamsCompleted} streams completed`);
  });
});
