/**
 * SIGTERM as a rolling restart sees it: `sluice serve` under steady traffic and with streams in
 * flight gets SIGTERM, finishes everything it accepted, exits 0 within its drain deadline, and a
 * new process takes the port; a client that retries refused connections loses no request.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runSigtermDrain } from '../../loadtest/chaos/sigterm-drain.js';

describe('SIGTERM drain', { timeout: 120_000 }, () => {
  it('loses no request of a keep-alive client that retries refused connections, finishes streams in flight and exits 0 within the drain deadline', async (t) => {
    const r = await runSigtermDrain({ rounds: 1, clients: 12, drainTimeoutMs: 5000 });
    t.diagnostic(JSON.stringify(r));
    assert.deepEqual(r.failures, {});
    assert.equal(r.acceptResets, 0);
    assert.equal(r.rounds.length, 1);
    assert.equal(r.rounds[0]!.exitCode, 0);
    assert.ok(r.rounds[0]!.exitMs < r.drainTimeoutMs, `exit took ${r.rounds[0]!.exitMs.toFixed(0)} ms`);
    assert.equal(r.streamsFailed, 0, 'streams in flight at the signal finished whole');
    assert.equal(r.streamsOk, 4);
    assert.ok(r.ok > 20, `only ${r.ok} requests were answered`);
    assert.ok(r.retries > 0, 'the restart window was seen as refused connections');
  });
});
