/**
 * The Sluice child a scenario starts: it comes up on the named listener and stops cleanly, and one
 * that cannot start ends in a `SLUICE_LOADTEST_SLUICE_START_FAILED` error carrying its own output
 * instead of a hang.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { freePort } from '../../../loadtest/env/free-port.js';
import { startSluiceChild } from '../../../loadtest/env/sluice-process.js';
import { LoadtestError, LoadtestErrorCode } from '../../../loadtest/loadtest-error.js';

async function config(extra = ''): Promise<string> {
  const [a, b, admin] = [await freePort(), await freePort(), await freePort()];
  return (
    `listeners:\n  - { name: first, address: 127.0.0.1, port: ${a} }\n` +
    `  - { name: second, address: 127.0.0.1, port: ${b} }\n` +
    `admin: { address: 127.0.0.1, port: ${admin} }\n` +
    'pools: [{ name: gpu, nodes: [{ url: "http://127.0.0.1:9" }] }]\n' +
    `routes: [{ name: all, match: {}, pool: gpu }]\n${extra}`
  );
}

describe('Sluice child process', () => {
  it('resolves with the named listener once Sluice is up, and stops it', async () => {
    const text = await config();
    const port = /name: second, address: 127\.0\.0\.1, port: (\d+)/.exec(text)?.[1];
    const child = await startSluiceChild(text, 'second');
    try {
      assert.equal(child.url, `http://127.0.0.1:${port}`);
      const res = await fetch(`${child.url}/v1/models`);
      await res.arrayBuffer();
      assert.ok(res.status > 0);
    } finally {
      await child.stop();
    }
    await assert.rejects(fetch(`${child.url}/v1/models`));
  });

  it('rejects with the child’s own output when Sluice exits at startup', async () => {
    const started = performance.now();
    await assert.rejects(startSluiceChild(await config('bogus_section: 1\n'), null), (err: unknown) => {
      assert.ok(err instanceof LoadtestError);
      assert.equal(err.code, LoadtestErrorCode.sluiceStartFailed);
      assert.match(err.message, /^the Sluice child process exited with 1; its last output lines:$/);
      assert.ok(
        err.details.some((l) => l.includes('bogus_section')),
        `details: ${err.details.join(' | ')}`,
      );
      return true;
    });
    assert.ok(performance.now() - started < 10_000, 'a failed start must not wait for the timeout');
  });
});
