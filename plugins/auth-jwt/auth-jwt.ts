/**
 * auth-jwt: authenticates requests by a JSON Web Token (`Authorization: Bearer <jwt>`) instead of
 * an API key: HS256, RS256 or ES256 with keys from the options (PEM, or a secret from the
 * environment) or a JWKS file, expiry, not-before, issuer and audience checks, and the tenant taken
 * from a claim. A refused request gets a 401 in the OpenAI error shape. Verified tokens are cached
 * until they expire, so a client that reuses its token pays one signature check.
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { definePlugin, type PluginRequest } from '../api.js';
import {
  ALGORITHMS,
  JwtError,
  keyFromJwk,
  keyFromPem,
  verifyJwt,
  type Algorithm,
  type ClaimChecks,
  type VerifyKey,
} from './jwt-verify.js';

interface KeyConfig {
  kid?: string;
  alg: Algorithm;
  /** HS256: the environment variable holding the secret. */
  secret_env?: string;
  /** RS256 / ES256: the public key, PEM. */
  public_key?: string;
}

interface Options {
  algorithms: Algorithm[];
  keys: KeyConfig[];
  jwks_file?: string;
  issuer?: string;
  audience: string[];
  tenant_claim: string;
  leeway_s: number;
  require_exp: boolean;
  /** Pass the token on to the node. */
  forward_token: boolean;
  /** Verified tokens remembered until their exp. */
  cache_size: number;
}

const BEARER = /^bearer\s+(\S+)\s*$/i;

function claimAt(claims: Record<string, unknown>, path: string): unknown {
  let v: unknown = claims;
  for (const part of path.split('.')) {
    if (typeof v !== 'object' || v === null) return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  return v;
}

async function loadKeys(o: Options, configDir: string): Promise<VerifyKey[]> {
  const keys: VerifyKey[] = [];
  for (const k of o.keys) {
    const kid = k.kid ?? null;
    if (k.alg === 'HS256') {
      if (k.secret_env === undefined) throw new Error(`key ${kid ?? '(no kid)'}: HS256 needs secret_env`);
      const secret = process.env[k.secret_env];
      if (secret === undefined || secret === '')
        throw new Error(`key ${kid ?? '(no kid)'}: environment variable ${k.secret_env} is not set`);
      keys.push({ kid, alg: 'HS256', key: Buffer.from(secret) });
    } else {
      if (k.public_key === undefined) throw new Error(`key ${kid ?? '(no kid)'}: ${k.alg} needs public_key`);
      keys.push(keyFromPem(kid, k.alg, k.public_key));
    }
  }
  if (o.jwks_file !== undefined) {
    const file = resolve(configDir, o.jwks_file);
    const set = JSON.parse(await readFile(file, 'utf8')) as { keys?: unknown };
    if (!Array.isArray(set.keys)) throw new Error(`${file}: a JWK Set needs "keys"`);
    for (const jwk of set.keys as Record<string, unknown>[]) keys.push(keyFromJwk(jwk));
  }
  if (keys.length === 0) throw new Error('no keys: give keys or jwks_file');
  return keys;
}

interface Verified {
  tenant: string;
  /** Epoch s the cached result stops being valid (the token's exp), Infinity without exp. */
  until: number;
}

export default definePlugin<Options>({
  name: 'auth-jwt',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: {
      algorithms: {
        type: 'array',
        minItems: 1,
        uniqueItems: true,
        items: { enum: [...ALGORITHMS] },
        default: [...ALGORITHMS],
      },
      keys: {
        type: 'array',
        default: [],
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['alg'],
          properties: {
            kid: { type: 'string' },
            alg: { enum: [...ALGORITHMS] },
            secret_env: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
            public_key: { type: 'string', pattern: '-----BEGIN' },
          },
        },
      },
      jwks_file: { type: 'string', minLength: 1 },
      issuer: { type: 'string' },
      audience: {
        anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }],
        default: [],
      },
      tenant_claim: { type: 'string', default: 'sub' },
      leeway_s: { type: 'integer', minimum: 0, maximum: 3600, default: 30 },
      require_exp: { type: 'boolean', default: true },
      forward_token: { type: 'boolean', default: false },
      cache_size: { type: 'integer', minimum: 0, maximum: 1000000, default: 10000 },
    },
  },
  async create(options, context) {
    const keys = await loadKeys(options, context.configDir);
    const allowed = new Set(options.algorithms);
    const checks: ClaimChecks = {
      audience: typeof options.audience === 'string' ? [options.audience] : options.audience,
      issuer: options.issuer ?? null,
      leewayS: options.leeway_s,
      requireExp: options.require_exp,
    };
    const refused = context.metrics.counter(
      'sluice_plugin_auth_jwt_refused_total',
      'Requests auth-jwt refused with 401.',
      ['plugin'],
    );
    const cache = new Map<string, Verified>();
    const deny = (req: PluginRequest, why: string): void => {
      refused.inc(1, context.name);
      req.reject(401, `Invalid bearer token: ${why}.`, 'invalid_api_key');
    };
    return {
      onRequest(req) {
        // Batch items Sluice makes itself carry the tenant of a caller the batch API authenticated
        // by API key. Without tenants it authenticates nobody: such an item is checked like any
        // request (a synchronous batch's items carry the caller's Authorization header).
        if (req.internal && req.tenant !== '') return;
        const m = BEARER.exec(req.header('authorization') ?? '');
        if (m === null) {
          deny(req, 'send a JWT as "Authorization: Bearer <token>"');
          return;
        }
        const token = m[1]!;
        const nowS = context.clock.wallMs() / 1000;
        let v = cache.get(token);
        if (v !== undefined && nowS > v.until + options.leeway_s) {
          cache.delete(token);
          v = undefined;
        }
        if (v === undefined) {
          let claims: Record<string, unknown>;
          try {
            claims = verifyJwt(token, keys, allowed, checks, nowS);
          } catch (e) {
            if (e instanceof JwtError) {
              deny(req, e.message);
              return;
            }
            throw e;
          }
          const tenant = claimAt(claims, options.tenant_claim);
          if (typeof tenant !== 'string' || tenant === '') {
            deny(req, `the claim ${options.tenant_claim} naming the tenant is missing`);
            return;
          }
          const exp = claims['exp'];
          v = { tenant, until: typeof exp === 'number' ? exp : Infinity };
          if (options.cache_size > 0) {
            if (cache.size >= options.cache_size) cache.delete(cache.keys().next().value!);
            cache.set(token, v);
          }
        }
        try {
          req.setTenant(v.tenant);
        } catch {
          deny(req, `tenant ${JSON.stringify(v.tenant)} is not configured`);
          return;
        }
        if (!options.forward_token) req.removeHeader('authorization');
      },
    };
  },
});
