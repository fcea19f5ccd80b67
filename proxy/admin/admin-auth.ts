/**
 * The admin token: `admin.token` resolved once at startup (from an environment variable, or a
 * SHA-256 digest) and the check of a presented `Authorization` header, either `Bearer <token>`
 * (tools, Prometheus) or `Basic` with the token as password (browsers, for the status page). Only
 * the token's digest is kept; comparison is constant-time over equal-length digests.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

/** Raised at startup when `admin.token.env` names a variable that is unset or empty. */
export class AdminTokenError extends Error {}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

export class AdminAuth {
  /** SHA-256 of the token, or null when no token is configured (everything is open). */
  private readonly digest: Buffer | null;

  constructor(token: { env: string } | { sha256: string } | undefined, env = process.env) {
    if (token === undefined) this.digest = null;
    else if ('env' in token) {
      const v = env[token.env];
      if (v === undefined || v === '')
        throw new AdminTokenError(
          `admin.token.env: environment variable ${token.env} is not set (or empty); set it or remove admin.token`,
        );
      this.digest = sha256(v);
    } else this.digest = Buffer.from(token.sha256, 'hex');
  }

  /** True when a token is configured. */
  get required(): boolean {
    return this.digest !== null;
  }

  /** True when `authorization` carries the token (or no token is configured). */
  check(authorization: string | undefined): boolean {
    if (this.digest === null) return true;
    if (authorization === undefined) return false;
    const sp = authorization.indexOf(' ');
    if (sp < 0) return false;
    const scheme = authorization.slice(0, sp).toLowerCase();
    const value = authorization.slice(sp + 1).trim();
    let presented: string;
    if (scheme === 'bearer') presented = value;
    else if (scheme === 'basic') {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      presented = colon < 0 ? decoded : decoded.slice(colon + 1);
    } else return false;
    return timingSafeEqual(sha256(presented), this.digest);
  }
}
