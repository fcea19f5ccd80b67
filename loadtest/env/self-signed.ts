/**
 * Self-signed certificates made on the spot with `openssl` (tests and the chaos run): an EC P-256
 * key and a certificate for 127.0.0.1 and localhost, written to a directory the caller owns. No
 * private key is ever committed; each run makes its own.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Paths of a generated certificate and its key. */
export interface SelfSigned {
  certFile: string;
  keyFile: string;
}

/**
 * Writes `NAME.crt` and `NAME.key` in `dir`: a certificate whose subject is `CN=commonName`, valid
 * for `days` from now, for IP 127.0.0.1 and DNS localhost. Rejects when `openssl` is missing or
 * fails.
 */
export async function makeSelfSigned(
  dir: string,
  name: string,
  commonName = name,
  days = 2,
): Promise<SelfSigned> {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  await run('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', keyFile]);
  await run('openssl', [
    'req',
    '-x509',
    '-new',
    '-key',
    keyFile,
    '-out',
    certFile,
    '-subj',
    `/CN=${commonName}`,
    '-addext',
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
    '-days',
    String(days),
  ]);
  return { certFile, keyFile };
}
