/**
 * API keys on the wire and at rest: extracting the key a client presented (`Authorization: Bearer`
 * or `x-api-key`) and computing the SHA-256 digest the tenant table stores. Nothing here logs or
 * keeps a key; comparison happens in `tenant-table.ts`.
 */
import { createHash } from 'node:crypto';

/** Anything that answers a request header by lower-case name (the lifecycle `Session` does). */
export interface HeaderSource {
  header(name: string): string | undefined;
}

const BEARER = 'bearer ';

/**
 * The API key a request presents, or undefined when it presents none. `Authorization: Bearer <key>`
 * wins (scheme case-insensitive, surrounding spaces ignored); otherwise `x-api-key`. An
 * `Authorization` header with another scheme (Basic, ...) is ignored rather than treated as a key.
 * An empty key counts as none.
 *
 * @example
 * extractApiKey(session); // 'sk-live-...' from "Authorization: Bearer sk-live-..."
 */
export function extractApiKey(source: HeaderSource): string | undefined {
  // HOT
  const auth = source.header('authorization');
  if (auth !== undefined) {
    const key = bearerKey(auth);
    if (key !== undefined) return key;
  }
  const header = source.header('x-api-key');
  if (header === undefined) return undefined;
  const key = header.trim();
  return key.length > 0 ? key : undefined;
}

/**
 * The key of an `Authorization` value `Bearer <key>` (scheme case-insensitive, surrounding spaces
 * ignored), or undefined for another scheme or an empty key.
 */
export function bearerKey(authorization: string): string | undefined {
  // HOT
  const value = authorization.trim();
  if (value.length <= BEARER.length || !startsWithBearer(value)) return undefined;
  const key = value.slice(BEARER.length).trim();
  return key.length > 0 ? key : undefined;
}

/** `value` starts with `bearer ` in any letter case (compared in place: no lower-cased copy). */
function startsWithBearer(value: string): boolean {
  for (let i = 0; i < BEARER.length; i++) {
    const c = value.charCodeAt(i);
    // ASCII letters fold to lower case with 0x20; the space must be a space.
    if ((c >= 0x41 && c <= 0x5a ? c | 0x20 : c) !== BEARER.charCodeAt(i)) return false;
  }
  return true;
}

/**
 * The lower-case hex SHA-256 digest of `key` (UTF-8), as written in a tenant's `sha256:` entry.
 * Operators compute it once (`printf %s "$KEY" | sha256sum`) so the key itself never sits in config.
 */
export function apiKeyDigest(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}
