/**
 * The test runner itself: a file that passes, fails, skips, hangs on an open server or blocks its
 * event loop is reported as such, each within its time limit.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { passed, runFile, skipReasons, tapSummary } from './run-tests.js';

const PRELOAD = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), 'open-handles.js')).href;

describe('test runner', { timeout: 60_000 }, () => {
  let dir = '';

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-runner-'));
    const fixture = (name: string, body: string): void =>
      writeFileSync(join(dir, name), `import { test } from 'node:test';\n${body}\n`);
    fixture('pass.test.mjs', "test('fine', () => {});\ntest('later', { skip: 'no redis here' }, () => {});");
    fixture('fail.test.mjs', "test('broken', () => { throw new Error('boom'); });");
    fixture(
      'open-server.test.mjs',
      "import net from 'node:net';\n" +
        "test('leaves a server open', async () => { const s = net.createServer(); await new Promise((r) => s.listen(0, '127.0.0.1', r)); });",
    );
    fixture('blocked.test.mjs', "test('spins', () => { for (;;) {} });");
  });

  after(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
  });

  it('passes a file whose tests pass and reports its skip reasons', async () => {
    const r = await runFile('pass.test.mjs', dir, 20_000, PRELOAD);
    assert.equal(passed(r), true, r.output);
    assert.deepEqual([r.tests, r.pass, r.skipped], [2, 1, 1]);
    assert.deepEqual(r.skips, ['no redis here']);
  });

  it('fails a file with a failing test', async () => {
    const r = await runFile('fail.test.mjs', dir, 20_000, PRELOAD);
    assert.equal(passed(r), false);
    assert.equal(r.fail, 1);
    assert.equal(r.timedOut, false);
  });

  it('stops a file that leaves a server open at its limit and names the server', async () => {
    const started = Date.now();
    const r = await runFile('open-server.test.mjs', dir, 1500, PRELOAD);
    assert.equal(passed(r), false);
    assert.equal(r.timedOut, true);
    assert.match(r.openHandles ?? '', /net\.Server listening on 127\.0\.0\.1:\d+/);
    assert.ok(Date.now() - started < 10_000, 'reported within the limit plus the grace period');
  });

  it('kills a file whose event loop is blocked', async () => {
    const r = await runFile('blocked.test.mjs', dir, 1000, PRELOAD);
    assert.equal(r.timedOut, true);
    assert.equal(r.openHandles, null, 'a blocked loop cannot report');
    assert.equal(passed(r), false);
  });

  it('reads the last TAP summary and every distinct skip reason', () => {
    const out = '# tests 1\n# pass 1\nok 1 - a # SKIP x\nok 2 - b # SKIP x\n# tests 4\n# pass 3\n# fail 1\n';
    assert.deepEqual(tapSummary(out), { tests: 4, pass: 3, fail: 1, skipped: 0, cancelled: 0 });
    assert.deepEqual(skipReasons(out), ['x']);
  });
});
