/** `sluice check`: output lines and exit codes for valid files, invalid files and bad usage. */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCheckCli, type CheckCliOutput } from '../../config/check-cli.js';
import { BASE_LINES, yamlLines } from './config-fixtures.js';

interface Captured extends CheckCliOutput {
  out: string;
  err: string;
}

function capture(): Captured {
  const captured: Captured = {
    out: '',
    err: '',
    stdout: (text) => void (captured.out += text),
    stderr: (text) => void (captured.err += text),
  };
  return captured;
}

void describe('runCheckCli', () => {
  let dir = '';
  let good = '';
  let bad = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-check-'));
    good = join(dir, 'good.yaml');
    bad = join(dir, 'bad.yaml');
    await writeFile(
      good,
      yamlLines(...BASE_LINES, 'listeners: [{name: a, port: 8080}, {name: b, port: 8081}]'),
    );
    await writeFile(bad, yamlLines(...BASE_LINES, '    match: {methods: [get]}', 'admin: {port: 99999}'));
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it('prints OK with counts and exits 0 for a valid file', async () => {
    const io = capture();
    assert.equal(await runCheckCli([good], io), 0);
    assert.equal(io.out, `${good}: OK (2 listeners, 1 pool, 1 route)\n`);
    assert.equal(io.err, '');
  });

  void it('prints each error on stderr and exits 1 for an invalid file', async () => {
    const io = capture();
    assert.equal(await runCheckCli([bad], io), 1);
    assert.equal(io.out, '');
    assert.equal(
      io.err,
      [
        `${bad}:8:23 routes[0].match.methods[0]: must be an HTTP method in upper case, like GET or POST (got "get")`,
        `${bad}:9:15 admin.port: expected an integer from 0 to 65535, got 99999`,
        `${bad}: 2 errors`,
        '',
      ].join('\n'),
    );
  });

  void it('checks every file given and exits 1 if any is invalid', async () => {
    const io = capture();
    const missing = join(dir, 'missing.yaml');
    assert.equal(await runCheckCli([good, missing, good], io), 1);
    assert.equal(io.out, `${good}: OK (2 listeners, 1 pool, 1 route)\n`.repeat(2));
    assert.match(
      io.err,
      new RegExp(`^${missing.replace(/[.\\]/g, '\\$&')}:1:1 cannot read the config file: ENOENT`),
    );
  });

  void it('exits 2 without files or with an unknown option', async () => {
    const none = capture();
    assert.equal(await runCheckCli([], none), 2);
    assert.match(none.err, /no config file given[\s\S]*usage: sluice check FILE/);
    const unknown = capture();
    assert.equal(await runCheckCli(['--strict', good], unknown), 2);
    assert.match(unknown.err, /unknown option "--strict"/);
    assert.equal(unknown.out, '');
  });

  void it('prints usage and exits 0 for --help', async () => {
    const io = capture();
    assert.equal(await runCheckCli(['--help'], io), 0);
    assert.match(io.out, /^usage: sluice check FILE \[FILE\.\.\.\]/);
  });

  void it('refuses what startup refuses and the file shows: an unknown simulator profile, a shared key', async () => {
    const profile = join(dir, 'profile.yaml');
    await writeFile(
      profile,
      yamlLines(...BASE_LINES, 'simulator: {nodes: 1, port: 9100, profile: nosuchprofile}'),
    );
    const shared = join(dir, 'shared.yaml');
    const digest = 'c'.repeat(64);
    await writeFile(
      shared,
      yamlLines(
        ...BASE_LINES,
        'tenants:',
        `  - {name: a, keys: [{sha256: ${digest}}]}`,
        `  - {name: b, keys: [{sha256: ${digest}}]}`,
      ),
    );
    const io = capture();
    assert.equal(await runCheckCli([profile, shared], io), 1);
    assert.equal(io.out, '');
    const lines = io.err.split('\n');
    assert.match(
      lines[0]!,
      new RegExp(
        `^${profile.replace(/[.\\]/g, '\\$&')}:8:44 simulator\\.profile: unknown profile "nosuchprofile" \\(available: .*\\bfast\\b.*\\)$`,
      ),
    );
    assert.deepEqual(lines.slice(1), [
      `${profile}: 1 error`,
      `${shared}:10:22 tenants[1].keys[0]: tenant "b" uses the same key as tenants[0].keys[0] (tenant "a")`,
      `${shared}: 1 error`,
      '',
    ]);
  });

  void it('accepts a shipped simulator profile by name, and leaves a profile file to startup', async () => {
    for (const profile of ['fast', './profiles/not-on-this-machine.yaml']) {
      const file = join(dir, 'simulator.yaml');
      await writeFile(
        file,
        yamlLines(...BASE_LINES, `simulator: {nodes: 1, port: 9100, profile: ${profile}}`),
      );
      const io = capture();
      assert.equal(await runCheckCli([file], io), 0, io.err);
    }
  });

  void it('takes names after -- as files', async () => {
    const io = capture();
    assert.equal(await runCheckCli(['--', good], io), 0);
    assert.equal(io.err, '');
  });
});
