/**
 * A listener's TLS certificate and key, read and checked before any engine uses them: both files
 * readable, the certificate a parseable X.509 chain, the key a private key that matches it, and
 * the certificate within its validity period. Shared by every downstream engine (uWS reads the
 * files itself; the own engine builds a `node:tls` secure context from the PEM contents). Startup and
 * reload only.
 */
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import type { ListenerTlsConfig } from '../../config/types.js';

/** The protocol a TLS listener negotiates through ALPN (RFC 7301): HTTP/1.1 only. */
export const ALPN_PROTOCOLS: readonly string[] = ['http/1.1'];

/** A checked certificate and key. */
export interface TlsMaterial {
  /** Absolute paths, as the engines reopen them. */
  certFile: string;
  keyFile: string;
  /** PEM contents as read and checked. */
  cert: Buffer;
  key: Buffer;
  /** SHA-256 over both files: a reload swaps the certificate only when this changes. */
  digest: string;
  /** Subject of the leaf certificate, for logs. */
  subject: string;
  /** End of the leaf certificate's validity. */
  notAfter: Date;
}

/** A certificate or key that cannot be used; the message names the file and the reason. */
export class TlsMaterialError extends Error {
  override readonly name = 'TlsMaterialError';
}

/** `path` resolved against the config file's directory when relative. */
function resolvePath(path: string, configDir: string): string {
  return isAbsolute(path) ? path : join(configDir, path);
}

async function read(path: string, what: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (e) {
    throw new TlsMaterialError(`cannot read the ${what} ${path}: ${(e as Error).message}`);
  }
}

/**
 * Reads and checks the files `tls` names (relative paths are taken from `configDir`). Rejects with
 * a TlsMaterialError naming the file and the problem; `now` is the clock for the validity check.
 */
export async function loadTlsMaterial(
  tls: ListenerTlsConfig,
  configDir: string,
  now: Date = new Date(),
): Promise<TlsMaterial> {
  const certFile = resolvePath(tls.cert_file, configDir);
  const keyFile = resolvePath(tls.key_file, configDir);
  const cert = await read(certFile, 'certificate');
  const key = await read(keyFile, 'private key');
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch (e) {
    throw new TlsMaterialError(`${certFile} is not a PEM certificate: ${(e as Error).message}`);
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (e) {
    throw new TlsMaterialError(`${keyFile} is not an unencrypted PEM private key: ${(e as Error).message}`);
  }
  if (!leaf.checkPrivateKey(privateKey))
    throw new TlsMaterialError(`${keyFile} is not the private key of the certificate ${certFile}`);
  const notAfter = new Date(leaf.validTo);
  const notBefore = new Date(leaf.validFrom);
  if (now > notAfter) throw new TlsMaterialError(`${certFile} expired on ${notAfter.toISOString()}`);
  if (now < notBefore)
    throw new TlsMaterialError(`${certFile} is not valid before ${notBefore.toISOString()}`);
  const digest = createHash('sha256').update(cert).update('\0').update(key).digest('hex');
  return { certFile, keyFile, cert, key, digest, subject: leaf.subject, notAfter };
}

/**
 * The TLS side of a listener on either engine, for certificate swaps and metrics. A swap is split
 * in two (`prepare` checks and readies the new certificate, `commit` serves it to new connections)
 * so that a reload touching several listeners swaps all of them or none.
 */
export interface SwappableTls {
  /** The certificate new connections get. */
  readonly material: TlsMaterial;
  /** Certificate swaps since start. */
  readonly swaps: number;
  /** Open connections accepted with an older certificate. */
  readonly retiredConnections: number;
  /** Readies `material` without serving it; throws, changing nothing, when it cannot be used. */
  prepare(material: TlsMaterial): object;
  /** Serves new connections with a prepared certificate; open connections keep theirs. */
  commit(prepared: object): void;
  /** Drops a prepared certificate that will not be used. */
  discard(prepared: object): void;
  /** Releases what the TLS side holds of its own (the listener closes the sockets). */
  close(): void;
}
