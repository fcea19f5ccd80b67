/**
 * Profiles: the shipped YAML files load and validate, and a bad file is rejected with a message that
 * names the file and the key.
 */

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { listSimProfiles, loadSimProfile, resolveSimProfile } from '../../../loadtest/sim/profile-loader.js';
import { DEFAULT_PROFILE, SimProfileError } from '../../../loadtest/sim/profile.js';

describe('simulator profiles', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-sim-profile-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, text: string): string => {
    const file = join(dir, name);
    writeFileSync(file, text);
    return file;
  };

  it('ships the H100, A100 and fast profiles, all valid', () => {
    const names = listSimProfiles();
    for (const name of ['llama-8b-h100-bf16', 'llama-8b-a100-bf16', 'fast']) {
      assert.ok(names.includes(name), `missing ${name}`);
      assert.equal(loadSimProfile(name).name, name);
    }
  });

  it('calibrates the H100 profile to the published figures', () => {
    const p = loadSimProfile('llama-8b-h100-bf16');
    assert.equal(p.prefill_fixed_ms, 12);
    assert.equal(p.prefill_tokens_per_s, 28000);
    assert.equal(p.decode_base_ms, 6);
    assert.equal(p.kv_capacity_tokens, 410000);
    // Ten prompts totalling 1,369 tokens in one prefill step: ~62 ms measured (Lambda, vLLM 0.6).
    const ttft = p.prefill_fixed_ms + (1369 * 1000) / p.prefill_tokens_per_s;
    assert.ok(Math.abs(ttft - 62) < 5, `${ttft}`);
    const a100 = loadSimProfile('llama-8b-a100-bf16');
    assert.ok(a100.decode_base_ms > p.decode_base_ms && a100.prefill_tokens_per_s < p.prefill_tokens_per_s);
  });

  it('loads a profile by path, fills missing keys from the defaults and names it after the file', () => {
    const file = write('partial.yaml', 'max_running: 3\ntime_scale: 0.5\n');
    const p = loadSimProfile(file);
    assert.equal(p.name, 'partial');
    assert.equal(p.max_running, 3);
    assert.equal(p.time_scale, 0.5);
    assert.equal(p.decode_base_ms, DEFAULT_PROFILE.decode_base_ms);
  });

  it('rejects an unknown key, naming the file and the key', () => {
    const file = write('unknown.yaml', 'max_runing: 3\n');
    assert.throws(
      () => loadSimProfile(file),
      (err: unknown) =>
        err instanceof SimProfileError && err.message.includes(file) && err.message.includes('max_runing'),
    );
  });

  it('rejects wrong types and ranges, naming the key', () => {
    for (const [text, key] of [
      ['max_running: "many"\n', 'max_running'],
      ['max_running: 1.5\n', 'max_running'],
      ['prefill_tokens_per_s: 0\n', 'prefill_tokens_per_s'],
      ['strict_models: 1\n', 'strict_models'],
      ['stream_head: later\n', 'stream_head'],
    ] as const) {
      const file = write(`bad-${key}.yaml`, text);
      assert.throws(
        () => loadSimProfile(file),
        new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*"${key}"`),
      );
    }
    assert.throws(() => loadSimProfile(write('list.yaml', '- 1\n')), /mapping/);
  });

  it('rejects an unknown profile name, listing the available ones', () => {
    assert.throws(() => loadSimProfile('no-such-gpu'), /available: .*fast/);
  });

  it('validates inline profile objects too', () => {
    assert.equal(resolveSimProfile({ max_running: 2 }).max_running, 2);
    assert.throws(() => resolveSimProfile({ bogus: 1 } as never), /inline profile: unknown key "bogus"/);
  });
});
