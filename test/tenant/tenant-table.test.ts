/**
 * Unit tests of the tenant table: keys from environment variables and SHA-256 digests, unknown and
 * missing keys, the anonymous tenant, configuration errors (which must name the tenant and the
 * variable but never a key), and that no key ever reaches the log.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { apiKeyDigest } from '../../proxy/tenant/api-key.js';
import {
  AUTH_CACHE_SIZE,
  TenantConfigError,
  compileTenants,
  type TenantConfig,
} from '../../proxy/tenant/tenant-table.js';
import { createLogger } from '../../proxy/runtime/logger.js';

const ACME_KEY = 'sk-acme-0123456789abcdef';
const BETA_KEY = 'sk-beta-fedcba9876543210';
const GAMMA_KEY = 'sk-gamma-key-given-only-as-a-digest';
const env = { ACME_KEY, BETA_KEY };

function configs(): TenantConfig[] {
  return [
    { name: 'acme', keys: [{ env: 'ACME_KEY' }], priority: 10, weight: 2 },
    { name: 'beta', keys: [{ env: 'BETA_KEY' }, { sha256: apiKeyDigest('sk-beta-second') }] },
    { name: 'gamma', keys: [{ sha256: apiKeyDigest(GAMMA_KEY).toUpperCase() }], priority: 1, weight: 0.5 },
    { name: 'public', keys: [] },
  ];
}

/** The tenants that have keys (no anonymous one). */
function keyed(): TenantConfig[] {
  return configs().filter((c) => c.keys.length > 0);
}

function capture(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  return { lines, logger: createLogger('debug', (l) => lines.push(l)) };
}

describe('tenant table', () => {
  it('authenticates a key read from an environment variable', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    const t = table.authenticate(ACME_KEY);
    assert.equal(t?.name, 'acme');
    assert.equal(t?.priority, 10);
    assert.equal(t?.weight, 2);
    assert.equal(t?.index, 0);
    assert.equal(t?.anonymous, false);
  });

  it('authenticates a key given only as a SHA-256 digest, in either hex case', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    assert.equal(table.authenticate(GAMMA_KEY)?.name, 'gamma');
    assert.equal(table.authenticate('sk-beta-second')?.name, 'beta');
  });

  it('finds every key of every tenant, including the last one configured', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    assert.equal(table.authenticate(BETA_KEY)?.name, 'beta');
    assert.equal(table.authenticate(GAMMA_KEY)?.name, 'gamma');
  });

  it('remembers keys that authenticated, never unknown ones, and forgets the oldest past its bound', () => {
    const many: TenantConfig[] = [
      {
        name: 'many',
        keys: Array.from({ length: AUTH_CACHE_SIZE + 10 }, (_, i) => ({ sha256: apiKeyDigest(`k-${i}`) })),
      },
    ];
    const table = compileTenants(many, {});
    assert.equal(table.authenticate('k-0')?.name, 'many');
    assert.equal(table.authenticate('k-0')?.name, 'many', 'a remembered key still authenticates');
    assert.equal(table.rememberedKeys, 1);
    assert.equal(table.authenticate('k-0x'), null, 'a key that extends a remembered one is unknown');
    assert.equal(table.authenticate('k-'), null);
    assert.equal(table.rememberedKeys, 1, 'failures are not remembered');
    for (let i = 0; i < AUTH_CACHE_SIZE + 10; i++) assert.equal(table.authenticate(`k-${i}`)?.name, 'many');
    assert.equal(table.rememberedKeys, AUTH_CACHE_SIZE);
    assert.equal(table.authenticate('k-0')?.name, 'many', 'a forgotten key authenticates by the full scan');
  });

  it('returns null for an unknown key of the same length as a real one and of other lengths', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    const sameLength = ACME_KEY.slice(0, -1) + (ACME_KEY.endsWith('f') ? 'e' : 'f');
    assert.equal(sameLength.length, ACME_KEY.length);
    assert.equal(table.authenticate(sameLength), null);
    assert.equal(table.authenticate(ACME_KEY.slice(0, 5)), null);
    assert.equal(table.authenticate(ACME_KEY + 'x'), null);
    assert.equal(table.authenticate('x'.repeat(10_000)), null);
  });

  it('never treats a digest as a key: presenting the stored digest itself fails', () => {
    const table = compileTenants(keyed(), { env });
    assert.equal(table.authenticate(apiKeyDigest(GAMMA_KEY)), null);
  });

  it('serves requests without a key as the anonymous tenant only when the route allows it', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    assert.equal(table.authenticate(undefined)?.name, 'public');
    assert.equal(table.authenticate('')?.name, 'public');
    assert.equal(table.authenticate(undefined)?.anonymous, true);
    assert.equal(table.authenticate(undefined, false), null);
    assert.equal(table.anonymous?.name, 'public');
  });

  it('never falls back to the anonymous tenant for a wrong key', () => {
    const table = compileTenants(configs(), { env, anonymous: 'public' });
    assert.equal(table.authenticate('sk-wrong'), null);
  });

  it('returns null for a request without a key when no anonymous tenant is configured', () => {
    const table = compileTenants(keyed(), { env });
    assert.equal(table.anonymous, null);
    assert.equal(table.authenticate(undefined), null);
  });

  it('fails to compile when an env variable is missing, naming the tenant and variable', () => {
    assert.throws(
      () => compileTenants(configs(), { env: { ACME_KEY }, anonymous: 'public' }),
      (err: unknown) =>
        err instanceof TenantConfigError &&
        err.path === 'tenants[1].keys[0].env' &&
        /BETA_KEY/.test(err.message) &&
        /"beta"/.test(err.message),
    );
  });

  it('fails to compile when an env key has surrounding whitespace, without echoing the key', () => {
    assert.throws(
      () => compileTenants(configs(), { env: { ...env, ACME_KEY: ACME_KEY + '\n' }, anonymous: 'public' }),
      (err: unknown) =>
        err instanceof TenantConfigError && /whitespace/.test(err.message) && !err.message.includes(ACME_KEY),
    );
  });

  it('rejects a malformed digest, a duplicate name, a tenant without keys and a bad weight', () => {
    const bad = (c: TenantConfig[], path: string): void =>
      assert.throws(
        () => compileTenants(c, { env }),
        (err: unknown) => err instanceof TenantConfigError && err.path === path,
      );
    bad([{ name: 'a', keys: [{ sha256: 'abc' }] }], 'tenants[0].keys[0].sha256');
    bad(
      [
        { name: 'a', keys: [{ env: 'ACME_KEY' }] },
        { name: 'a', keys: [{ env: 'BETA_KEY' }] },
      ],
      'tenants[1].name',
    );
    bad([{ name: 'a', keys: [] }], 'tenants[0].keys');
    bad([{ name: 'a', keys: [{ env: 'ACME_KEY' }], weight: 0 }], 'tenants[0].weight');
    bad([{ name: 'a', keys: [{ env: 'ACME_KEY' }], priority: 1.5 }], 'tenants[0].priority');
  });

  it('rejects the same key configured for two tenants, without echoing the key', () => {
    const c: TenantConfig[] = [
      { name: 'a', keys: [{ env: 'ACME_KEY' }] },
      { name: 'b', keys: [{ sha256: apiKeyDigest(ACME_KEY) }] },
    ];
    assert.throws(
      () => compileTenants(c, { env }),
      (err: unknown) =>
        err instanceof TenantConfigError &&
        err.path === 'tenants[1].keys[0]' &&
        /tenants\[0\]\.keys\[0\]/.test(err.message) &&
        !err.message.includes(ACME_KEY),
    );
  });

  it('rejects an anonymous tenant name that matches no tenant', () => {
    assert.throws(() => compileTenants(keyed(), { env, anonymous: 'nobody' }), /no tenant is named "nobody"/);
  });

  it('applies default priority 0 and weight 1', () => {
    const table = compileTenants([{ name: 'a', keys: [{ env: 'ACME_KEY' }] }], { env });
    assert.deepEqual(
      { priority: table.tenants[0]!.priority, weight: table.tenants[0]!.weight },
      { priority: 0, weight: 1 },
    );
    assert.equal(table.get('a'), table.tenants[0]);
    assert.equal(table.get('nobody'), null);
  });

  it('never writes a key, or its digest, to the log while compiling and authenticating', () => {
    const { lines, logger } = capture();
    const table = compileTenants(configs(), { env, anonymous: 'public', logger });
    table.authenticate(ACME_KEY);
    table.authenticate(GAMMA_KEY);
    table.authenticate('sk-unknown-key-presented');
    table.authenticate(undefined);
    assert.ok(lines.length >= 2, 'the compile summary and the failed authentication are logged');
    const all = lines.join('');
    for (const secret of [
      ACME_KEY,
      BETA_KEY,
      GAMMA_KEY,
      'sk-unknown-key-presented',
      apiKeyDigest(GAMMA_KEY),
    ]) {
      assert.ok(!all.includes(secret), `log contains ${secret.slice(0, 6)}...`);
    }
    assert.match(all, /4 tenants, 4 keys/);
    assert.match(all, /authentication failed/);
  });
});
