/**
 * The active config as `GET /admin/config` shows it: the defaults-applied config as JSON, with what
 * would let its reader in elsewhere masked. The password of every URL that carries one (a Redis
 * `url`, a tracing endpoint, a plugin option) and the digest of every key (tenants' keys,
 * `admin.token`: a digest lets a short key be guessed offline) read `****`; everything else is
 * shown as applied, environment variable names included. Built per request on the admin listener,
 * never on the request path.
 */
import type { SluiceConfig } from '../../config/types.js';

/** What a masked secret reads in the admin API. */
export const REDACTED = '****';

/** `scheme://`, then the user information up to the last `@` before the host (no `/`, `?`, `#`). */
const USERINFO = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#]*)@/;

/**
 * `url` with the password in its user information replaced by `****` and every other character as
 * written: `redis://:s3cret@cache:6379/0` → `redis://:****@cache:6379/0`, `redis://app:pw@cache` →
 * `redis://app:****@cache`. A string that is not such a URL, or has no password, is returned as is.
 */
export function redactUrlPassword(url: string): string {
  const m = USERINFO.exec(url);
  if (m === null) return url;
  const userinfo = m[2]!;
  const colon = userinfo.indexOf(':');
  if (colon < 0) return url;
  return `${m[1]!}${userinfo.slice(0, colon + 1)}${REDACTED}@${url.slice(m[0].length)}`;
}

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Names under which a string is a credential whatever it looks like (plugin options such as
 * `api_key`, a header rule setting `Authorization`): `token` and `secret` alone or at the end of a
 * name, `password`, `api_key` / `apikey`, `authorization`. `max_tokens` and the like do not match.
 */
const SECRET_NAME = /(^|[_-])(token|secret|password|passwd|api[_-]?key|apikey|authorization)$/i;

/** Every string of `value` through {@link redactUrlPassword}, and strings under secret names masked, in place. */
function redactUrls(value: unknown): unknown {
  if (typeof value === 'string') return redactUrlPassword(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = redactUrls(value[i]);
  } else if (isRecord(value)) {
    for (const key of Object.keys(value)) {
      const v = value[key];
      value[key] = typeof v === 'string' && SECRET_NAME.test(key) ? REDACTED : redactUrls(v);
    }
  }
  return value;
}

/** A `{ sha256 }` key reference with its digest masked; `{ env }` references are names, kept. */
function redactDigest(key: unknown): void {
  if (isRecord(key) && typeof key['sha256'] === 'string') key['sha256'] = REDACTED;
}

/**
 * The JSON form of `config` (as `JSON.stringify` renders it) with URL passwords and key digests
 * masked, as described in the module comment. `config` itself is not changed.
 *
 * @example
 * redactedConfig(config).rate_limits.redis.url; // 'redis://:****@cache:6379'
 */
export function redactedConfig(config: SluiceConfig): Json {
  const view = redactUrls(JSON.parse(JSON.stringify(config))) as Json;
  if (Array.isArray(view['tenants'])) {
    for (const tenant of view['tenants']) {
      if (isRecord(tenant) && Array.isArray(tenant['keys'])) tenant['keys'].forEach(redactDigest);
    }
  }
  if (isRecord(view['admin'])) redactDigest(view['admin']['token']);
  if (Array.isArray(view['pools'])) {
    for (const pool of view['pools']) {
      const headers = isRecord(pool) ? pool['request_headers'] : undefined;
      if (!isRecord(headers)) continue;
      // Node credentials: a value written in the file is masked; one read from the environment
      // (`${env:NAME}`) shows the name only.
      for (const name of Object.keys(headers)) {
        const v = headers[name];
        if (typeof v === 'string' && !onlyEnvRefs(v)) headers[name] = REDACTED;
      }
    }
  }
  return view;
}

/** `${env:NAME}` in a header value. */
const ENV_REFS = /\$\{env:[A-Za-z_][A-Za-z0-9_]*\}/g;

/** True when `v` holds environment references and, besides them, at most an auth scheme word. */
function onlyEnvRefs(v: string): boolean {
  if (v.match(ENV_REFS) === null) return false;
  const rest = v.replace(ENV_REFS, '').trim().toLowerCase();
  return rest === '' || rest === 'bearer' || rest === 'basic' || rest === 'token';
}
