/**
 * Checking a listener's certificate and key before an engine uses them: relative paths from the
 * config's directory, a digest that changes with either file, and a clear error for an unreadable
 * file, a file that is not PEM, a key of another certificate, or a certificate outside its validity.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeSelfSigned, type SelfSigned } from '../../loadtest/env/self-signed.js';
import { ALPN_PROTOCOLS, loadTlsMaterial, TlsMaterialError } from '../../proxy/server/tls-material.js';

describe('TLS material', { timeout: 30_000 }, () => {
  let dir = '';
  let a: SelfSigned;
  let b: SelfSigned;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-tls-material-'));
    a = await makeSelfSigned(dir, 'a', 'cert-a');
    b = await makeSelfSigned(dir, 'b', 'cert-b');
  });

  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('reads a certificate and its key by paths relative to the config directory', async () => {
    const m = await loadTlsMaterial({ cert_file: 'a.crt', key_file: 'a.key' }, dir);
    assert.equal(m.certFile, a.certFile);
    assert.equal(m.subject, 'CN=cert-a');
    assert.ok(m.notAfter.getTime() > Date.now());
    assert.match(m.digest, /^[0-9a-f]{64}$/);
    const other = await loadTlsMaterial({ cert_file: b.certFile, key_file: b.keyFile }, '/nowhere');
    assert.notEqual(other.digest, m.digest);
    assert.deepEqual(ALPN_PROTOCOLS, ['http/1.1']);
  });

  it('names the file and the reason when it cannot be used', async () => {
    await writeFile(join(dir, 'junk.crt'), 'not a certificate');
    const cases: [string, string, RegExp][] = [
      ['missing.crt', 'a.key', /cannot read the certificate .*missing\.crt/],
      ['a.crt', 'missing.key', /cannot read the private key .*missing\.key/],
      ['junk.crt', 'a.key', /junk\.crt is not a PEM certificate/],
      ['a.crt', 'a.crt', /a\.crt is not an unencrypted PEM private key/],
      ['a.crt', 'b.key', /b\.key is not the private key of the certificate .*a\.crt/],
    ];
    for (const [cert, key, message] of cases) {
      await assert.rejects(
        loadTlsMaterial({ cert_file: cert, key_file: key }, dir),
        (e: unknown) => e instanceof TlsMaterialError && message.test(e.message),
        `${cert} + ${key}`,
      );
    }
  });

  it('refuses a certificate outside its validity period', async () => {
    const files = { cert_file: 'a.crt', key_file: 'a.key' };
    await assert.rejects(loadTlsMaterial(files, dir, new Date(Date.now() + 10 * 86_400_000)), /expired on/);
    await assert.rejects(
      loadTlsMaterial(files, dir, new Date(Date.now() - 10 * 86_400_000)),
      /is not valid before/,
    );
  });
});
