/**
 * JSON Web Token verification for auth-jwt with node:crypto only: compact JWS (RFC 7515) with
 * HS256, RS256 or ES256 (RFC 7518 §3), keys given as PEM, shared secrets or a JWK Set, and the
 * registered claims `exp`, `nbf`, `iss` and `aud` (RFC 7519 §4.1). Pure functions over a key set.
 */
import { createHmac, createPublicKey, timingSafeEqual, verify, type KeyObject } from 'node:crypto';

export const ALGORITHMS = ['HS256', 'RS256', 'ES256'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

/** A verification key. */
export interface VerifyKey {
  /** Key id (`kid`), or null to match tokens without one (and any kid when it is the only key). */
  kid: string | null;
  alg: Algorithm;
  /** HS256: the secret; else the public key. */
  key: Buffer | KeyObject;
}

/** Why a token was refused (for the 401 message; never includes the token). */
export class JwtError extends Error {}

/** What to check besides the signature. */
export interface ClaimChecks {
  /** Accepted audiences; empty: not checked. */
  audience: readonly string[];
  /** Required issuer, or null. */
  issuer: string | null;
  /** Tolerated clock difference, s. */
  leewayS: number;
  /** Require an `exp` claim. */
  requireExp: boolean;
}

function b64(part: string): Buffer {
  return Buffer.from(part, 'base64url');
}

function parseJson(part: string, what: string): Record<string, unknown> {
  try {
    const v = JSON.parse(b64(part).toString('utf8')) as unknown;
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new JwtError(`the token's ${what} is not a JSON object`);
}

/** A key from a JWK (RFC 7517): `oct` for HS256, `RSA` for RS256, `EC` P-256 for ES256. */
export function keyFromJwk(jwk: Record<string, unknown>): VerifyKey {
  const kid = typeof jwk['kid'] === 'string' ? jwk['kid'] : null;
  const kty = jwk['kty'];
  if (kty === 'oct') {
    if (typeof jwk['k'] !== 'string') throw new Error(`JWK ${kid ?? ''}: an oct key needs k`);
    return { kid, alg: 'HS256', key: b64(jwk['k']) };
  }
  const alg: Algorithm = kty === 'RSA' ? 'RS256' : kty === 'EC' ? 'ES256' : ('' as Algorithm);
  if (alg === ('' as Algorithm)) throw new Error(`JWK ${kid ?? ''}: unsupported kty ${String(kty)}`);
  if (typeof jwk['alg'] === 'string' && jwk['alg'] !== alg)
    throw new Error(`JWK ${kid ?? ''}: alg ${jwk['alg']} does not fit kty ${String(kty)}`);
  if (kty === 'EC' && jwk['crv'] !== 'P-256') throw new Error(`JWK ${kid ?? ''}: ES256 needs crv P-256`);
  return { kid, alg, key: createPublicKey({ key: jwk as never, format: 'jwk' }) };
}

/** A key from PEM text (RS256: an RSA public key; ES256: a P-256 public key). */
export function keyFromPem(kid: string | null, alg: Algorithm, pem: string): VerifyKey {
  const key = createPublicKey(pem);
  const type = key.asymmetricKeyType;
  if (alg === 'RS256' && type !== 'rsa')
    throw new Error(`key ${kid ?? ''}: RS256 needs an RSA key (got ${type})`);
  if (alg === 'ES256' && (type !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1'))
    throw new Error(`key ${kid ?? ''}: ES256 needs a P-256 EC key`);
  return { kid, alg, key };
}

function checkSignature(alg: Algorithm, key: VerifyKey['key'], input: string, sig: Buffer): boolean {
  if (alg === 'HS256') {
    const mac = createHmac('sha256', key).update(input).digest();
    return mac.length === sig.length && timingSafeEqual(mac, sig);
  }
  if (alg === 'RS256') return verify('sha256', Buffer.from(input), key, sig);
  // JWS carries ECDSA signatures as r || s (RFC 7518 §3.4), not DER.
  return verify('sha256', Buffer.from(input), { key: key as KeyObject, dsaEncoding: 'ieee-p1363' }, sig);
}

/**
 * Verifies `token` against `keys` (only algorithms in `allowed`) and the claim checks at `nowS`
 * (epoch seconds). Returns the claims; throws JwtError saying why the token is refused.
 */
export function verifyJwt(
  token: string,
  keys: readonly VerifyKey[],
  allowed: ReadonlySet<Algorithm>,
  checks: ClaimChecks,
  nowS: number,
): Record<string, unknown> {
  const parts = token.split('.');
  if (parts.length !== 3) throw new JwtError('the token is not a compact JWS (header.payload.signature)');
  const [h, p, s] = parts as [string, string, string];
  const header = parseJson(h, 'header');
  const alg = header['alg'];
  if (typeof alg !== 'string' || !allowed.has(alg as Algorithm))
    throw new JwtError(`algorithm ${JSON.stringify(alg)} is not accepted`);
  const kid = typeof header['kid'] === 'string' ? header['kid'] : null;
  const candidates = keys.filter((k) => k.alg === alg && (kid === null || k.kid === null || k.kid === kid));
  if (candidates.length === 0) throw new JwtError(`no ${alg} key${kid === null ? '' : ` with kid ${kid}`}`);
  const sig = b64(s);
  const input = `${h}.${p}`;
  if (!candidates.some((k) => checkSignature(alg as Algorithm, k.key, input, sig)))
    throw new JwtError('bad signature');
  const claims = parseJson(p, 'payload');
  const exp = claims['exp'];
  if (exp === undefined) {
    if (checks.requireExp) throw new JwtError('the token has no exp');
  } else if (typeof exp !== 'number' || nowS > exp + checks.leewayS) {
    throw new JwtError('the token has expired');
  }
  const nbf = claims['nbf'];
  if (nbf !== undefined) {
    // A NumericDate (RFC 7519 §2): a string or anything else is refused, as for exp.
    if (typeof nbf !== 'number') throw new JwtError('the token has an nbf that is not a number');
    if (nowS + checks.leewayS < nbf) throw new JwtError('the token is not valid yet');
  }
  if (checks.issuer !== null && claims['iss'] !== checks.issuer) throw new JwtError('wrong issuer');
  if (checks.audience.length > 0) {
    const aud = claims['aud'];
    const list = Array.isArray(aud) ? aud : [aud];
    if (!list.some((a) => typeof a === 'string' && checks.audience.includes(a)))
      throw new JwtError('wrong audience');
  }
  return claims;
}
