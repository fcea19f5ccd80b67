/**
 * Crash recovery of the batch API end to end: a real Sluice process takes a batch over HTTP, is
 * killed with SIGKILL part-way, restarts on the same SQLite file and finishes the batch; the
 * output file holds every item exactly once, in input order, with results derived from the inputs.
 * (`sluice loadtest jobs-crash` runs the same with 10,000 items.)
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runJobsCrash } from '../../loadtest/jobs/crash-run.js';

describe('batch API crash recovery', () => {
  it('finishes a 1,500-item batch after kill -9 and restart, each result once and in order', async () => {
    const r = await runJobsCrash({ items: 1500, killAt: 0.3, concurrency: 32, leaseMs: 1500 });
    assert.ok(r.completedAtKill >= 450 && r.completedAtKill < 1500, `killed mid-way (${r.completedAtKill})`);
    assert.equal(r.outputLines, 1500);
    assert.equal(r.exactlyOnce, true);
    assert.equal(r.inOrder, true);
    assert.equal(r.resultsMatchInputs, true);
    assert.ok(r.executions >= 1500, 'every item ran');
    assert.equal(r.ok, true);
  });
});
