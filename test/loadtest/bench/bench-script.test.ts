/**
 * The benchmark's entry points, run as `npm run bench` runs them but without load: the shell
 * wrapper's syntax, a dry run (plans, checks the configurations, starts nothing), a dry run that
 * reports a configuration Sluice refuses, and re-printing a results file.
 */

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { findSluiceRoot } from '../../../config/sluice-root.js';

const root = findSluiceRoot();
const script = join(root, 'loadtest', 'bench', 'bench.sh');
const scratch = mkdtempSync(join(tmpdir(), 'sluice-bench-test-'));

/** Runs the wrapper; a hang fails the test instead of the suite. */
function bench(args: string[], env: Record<string, string> = {}): { code: number | null; out: string } {
  const r = spawnSync('bash', [script, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('benchmark entry points', { timeout: 120_000 }, () => {
  after(() => rmSync(scratch, { recursive: true, force: true }));

  it('has a shell wrapper that bash parses', () => {
    const r = spawnSync('bash', ['-n', script], { encoding: 'utf8', timeout: 10_000 });
    assert.equal(r.status, 0, r.stderr);
  });

  it('prints the plan of a dry run without starting anything, and exits 0', () => {
    const r = bench(['--dry-run'], { QUICK: '1' });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /settings: RUNS=1 DUR=2 /);
    for (const name of [
      'node-fast',
      'nginx',
      'haproxy',
      'bare-fast',
      'sluice-min',
      'sluice-full',
      'sluice-paced',
    ]) {
      assert.match(r.out, new RegExp(`^  ${name}\\s+cpu`, 'm'), name);
    }
    assert.match(r.out, /estimated time: about \d+ min/);
    assert.doesNotMatch(r.out, /config refused/);
  });

  it('fails a dry run whose extra configuration Sluice refuses, naming the key', () => {
    const overlay = join(scratch, 'typo.yaml');
    writeFileSync(overlay, 'servr: { drain_timeout_ms: 10 }\n');
    const r = bench(['--dry-run'], { TARGETS: 'sluice-x-typo', EXTRA_SLUICE_CONFIGS: overlay });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /config refused: sluice-x-typo: .*servr/);
  });

  it('fails with a message on an unknown target or a malformed knob', () => {
    const unknown = bench(['--dry-run'], { TARGETS: 'ngnix' });
    assert.equal(unknown.code, 2);
    assert.match(unknown.out, /unknown target\(s\) ngnix/);
    const bad = bench(['--dry-run'], { RUNS: 'three' });
    assert.equal(bad.code, 2);
    assert.match(bad.out, /RUNS=three/);
  });

  it('re-prints the tables of a results file', () => {
    const file = join(scratch, 'results.jsonl');
    const line = {
      run: 1,
      target: 'bare',
      label: 'bare uWS + undici forwarder',
      case: 'fast',
      proxy: 'bare',
      conns: 50,
      durS: 10,
      requests: 100_000,
      rps: 10_000,
      p50Ms: 1,
      p90Ms: 2,
      p99Ms: 3,
      p999Ms: 4,
      maxMs: 5,
      errors: 0,
      corePct: [40, 95],
      stealPct: 0,
      proxyCpuPct: 50,
      upstreamCpuPct: 20,
      proxyUsPerReq: 51.5,
      upstreamUsPerReq: 20,
      chunksPerReq: 0,
      proxyUsPerChunk: null,
    };
    writeFileSync(file, `${JSON.stringify(line)}\n`);
    const r = bench(['--report', file]);
    assert.equal(r.code, 0, r.out);
    assert.match(
      r.out,
      /\| bare uWS \+ undici forwarder \(`bare`\) \| 51\.5 \| 1\.00 \| – \| 10\.0k \| 0 \|/,
    );
  });
});
