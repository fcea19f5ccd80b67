/**
 * The tenant table: tenants compiled once from configuration (name, API keys, priority class,
 * fair-share weight) and the per-request lookup from a presented API key to its tenant. Keys are
 * held only as SHA-256 digests and are never logged; only tenant names appear in messages.
 *
 * Constant-time authentication: the presented key is hashed with SHA-256 and its digest compared,
 * with `crypto.timingSafeEqual`, against the digest of every configured key, always all of them,
 * remembering the match without leaving the loop. The time taken depends on the presented key's
 * length (hashing, which the caller already knows) and on the number of configured keys, not on
 * which tenant matched, whether any did, or how many leading bytes of a key were right. Comparing
 * fixed-length digests also removes the length leak a direct string comparison would have.
 *
 * Keys that authenticated are remembered (a bounded map from the key to its tenant, reset by every
 * reload), so a client's next request skips the hash. Only a key that already succeeded can hit
 * that map, so its timing reveals nothing about keys the caller does not hold; failures are never
 * remembered and always pay the full scan. The map holds presented keys in process memory, as the
 * request itself did; nothing writes them anywhere.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../runtime/logger.js';

/** One API key reference: an environment variable holding the key, or the key's SHA-256 digest. */
export type TenantKeyConfig = { env: string } | { sha256: string };

/** A tenant as configured (camelCase; the YAML mapping is `tenants[]` in docs/tenants.md). */
export interface TenantConfig {
  /** Unique name; the only tenant identifier that ever appears in logs and metrics. */
  name: string;
  /** Keys that authenticate as this tenant. May be empty only for the anonymous tenant. */
  keys: readonly TenantKeyConfig[];
  /** Priority class for admission: higher is dequeued first and shed last. Integer. Default 0. */
  priority?: number;
  /** Fair-share weight inside its priority class (relative, > 0). Default 1. */
  weight?: number;
}

/** Options of `compileTenants`. */
export interface TenantTableOptions {
  /** Name of the tenant that requests presenting no key fall back to, when a route allows it. Default none. */
  anonymous?: string | null;
  /** Where `env` references are read. Default `process.env`. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Receives one summary line at compile time and a debug line per failed authentication. */
  logger?: Logger;
}

/** A compiled tenant. Frozen; compare by reference or by `index`. */
export interface Tenant {
  readonly name: string;
  /** Priority class (integer, higher first). */
  readonly priority: number;
  /** Fair-share weight (> 0). */
  readonly weight: number;
  /** Dense position in the table, 0-based: lets callers keep per-tenant arrays instead of maps. */
  readonly index: number;
  /** True for the anonymous default tenant. */
  readonly anonymous: boolean;
}

/** A configuration problem, with the path of the offending field (`tenants[1].keys[0].env`). */
export class TenantConfigError extends Error {
  readonly path: string;

  constructor(path: string, message: string) {
    super(`${path}: ${message}`);
    this.name = 'TenantConfigError';
    this.path = path;
  }
}

const HEX_DIGEST = /^[0-9a-fA-F]{64}$/;

/**
 * Keys remembered after a successful authentication, per table. Bounded: the oldest is forgotten
 * first. A reload compiles a new table, so a removed key stops working at once.
 */
export const AUTH_CACHE_SIZE = 1024;

/** The compiled tenant table. Immutable; a reload compiles a new one. */
export class TenantTable {
  /** Every tenant in configuration order (`tenants[i].index === i`). */
  readonly tenants: readonly Tenant[];
  /** The anonymous default tenant, or null when none is configured. */
  readonly anonymous: Tenant | null;
  /** SHA-256 digest of every key (32 bytes each), parallel to `owners`. */
  private readonly digests: readonly Buffer[];
  private readonly owners: readonly Tenant[];
  private readonly names: ReadonlyMap<string, Tenant>;
  private readonly logger: Logger | null;
  /**
   * Keys that authenticated recently, to their tenant (exact string match, insertion order = age).
   * Only successes are kept, so an unknown key always pays the full constant-time scan.
   */
  private readonly recent = new Map<string, Tenant>();

  /** Use `compileTenants`. */
  constructor(
    tenants: readonly Tenant[],
    anonymous: Tenant | null,
    digests: readonly Buffer[],
    owners: readonly Tenant[],
    logger: Logger | null,
  ) {
    this.tenants = tenants;
    this.anonymous = anonymous;
    this.digests = digests;
    this.owners = owners;
    this.names = new Map(tenants.map((t) => [t.name, t]));
    this.logger = logger;
  }

  /**
   * The tenant a presented key belongs to, or null when the key is unknown. A request that presents
   * no key (undefined or empty) gets the anonymous tenant when one is configured and
   * `allowAnonymous` is true (the route's choice; default true), else null. A wrong key never falls
   * back to the anonymous tenant: it is a 401. See the module comment for the constant-time scan.
   */
  authenticate(presented: string | undefined, allowAnonymous = true): Tenant | null {
    // HOT
    if (presented === undefined || presented.length === 0) {
      return allowAnonymous ? this.anonymous : null;
    }
    const known = this.recent.get(presented);
    if (known !== undefined) return known;
    const digest = createHash('sha256').update(presented, 'utf8').digest();
    const digests = this.digests;
    let match = -1;
    for (let i = 0; i < digests.length; i++) {
      // No early exit: every digest is compared whatever the outcome of the previous ones.
      const equal = timingSafeEqual(digest, digests[i]!);
      match = equal ? i : match;
    }
    if (match < 0) {
      this.logger?.debug('tenant: authentication failed (unknown api key)');
      return null;
    }
    const tenant = this.owners[match]!;
    if (this.recent.size >= AUTH_CACHE_SIZE) this.recent.delete(this.recent.keys().next().value!);
    this.recent.set(presented, tenant);
    return tenant;
  }

  /** How many keys are remembered after a successful authentication (for tests and diagnostics). */
  get rememberedKeys(): number {
    return this.recent.size;
  }

  /** The tenant called `name`, or null. For compile time (config checks, tests), not per request. */
  get(name: string): Tenant | null {
    return this.names.get(name) ?? null;
  }
}

/**
 * Why a tenant with `keyCount` keys cannot be configured, or undefined when it can: only the
 * anonymous tenant may have none. Used by `compileTenants` and by `sluice check`'s semantic rules.
 */
export function tenantKeysProblem(tenant: string, keyCount: number, anonymous: boolean): string | undefined {
  return keyCount === 0 && !anonymous
    ? `tenant "${tenant}" has no keys (only the anonymous tenant may)`
    : undefined;
}

/**
 * Finds a key configured twice (under two tenants, or twice under one): a presented key stands for
 * one tenant only, so the later one is refused. Keys are compared by an identity the caller picks:
 * `compileTenants` uses every key's digest; `sluice check`, which does not read the environment,
 * uses the digests written in the file and the names of the variables.
 */
export class SharedKeyFinder {
  private readonly first = new Map<string, { path: string; tenant: string }>();

  /**
   * Records key `id`, written at `path` (`tenants[1].keys[0]`) for `tenant`. Returns the message
   * naming the earlier key when one had the same id (the earlier one stays recorded), else undefined.
   */
  add(id: string, path: string, tenant: string): string | undefined {
    const earlier = this.first.get(id);
    if (earlier !== undefined) {
      return `tenant "${tenant}" uses the same key as ${earlier.path} (tenant "${earlier.tenant}")`;
    }
    this.first.set(id, { path, tenant });
    return undefined;
  }
}

/**
 * Compiles configured tenants into a `TenantTable`. Reads `env` references now (a missing or empty
 * variable is an error naming the tenant and the variable, never the value) and validates digests,
 * names, priorities and weights. Throws `TenantConfigError` on the first problem: fail fast at
 * startup or reload.
 *
 * @example
 * const table = compileTenants(
 *   [{ name: 'acme', keys: [{ env: 'ACME_KEY' }], priority: 1, weight: 2 },
 *    { name: 'public', keys: [], priority: 0, weight: 1 }],
 *   { anonymous: 'public' },
 * );
 * table.authenticate(extractApiKey(session))?.name; // 'acme'
 */
export function compileTenants(
  configs: readonly TenantConfig[],
  options: TenantTableOptions = {},
): TenantTable {
  const env = options.env ?? process.env;
  const anonymousName = options.anonymous ?? null;
  const tenants: Tenant[] = [];
  const digests: Buffer[] = [];
  const owners: Tenant[] = [];
  const shared = new SharedKeyFinder();
  const names = new Set<string>();

  for (let i = 0; i < configs.length; i++) {
    const c = configs[i]!;
    const path = `tenants[${i}]`;
    if (typeof c.name !== 'string' || c.name.length === 0) {
      throw new TenantConfigError(`${path}.name`, 'a tenant needs a non-empty name');
    }
    if (names.has(c.name)) throw new TenantConfigError(`${path}.name`, `duplicate tenant name "${c.name}"`);
    names.add(c.name);
    const priority = c.priority ?? 0;
    if (!Number.isSafeInteger(priority)) {
      throw new TenantConfigError(`${path}.priority`, `priority must be an integer, got ${String(priority)}`);
    }
    const weight = c.weight ?? 1;
    if (!Number.isFinite(weight) || weight <= 0) {
      throw new TenantConfigError(`${path}.weight`, `weight must be a number > 0, got ${String(weight)}`);
    }
    const isAnonymous = c.name === anonymousName;
    const tenant: Tenant = Object.freeze({
      name: c.name,
      priority,
      weight,
      index: i,
      anonymous: isAnonymous,
    });
    tenants.push(tenant);
    const keyless = tenantKeysProblem(c.name, c.keys.length, isAnonymous);
    if (keyless !== undefined) throw new TenantConfigError(`${path}.keys`, keyless);
    for (let k = 0; k < c.keys.length; k++) {
      const keyPath = `${path}.keys[${k}]`;
      const digest = keyDigest(c.keys[k]!, keyPath, c.name, env);
      const clash = shared.add(digest.toString('hex'), keyPath, c.name);
      if (clash !== undefined) throw new TenantConfigError(keyPath, clash);
      digests.push(digest);
      owners.push(tenant);
    }
  }

  let anonymous: Tenant | null = null;
  if (anonymousName !== null) {
    anonymous = tenants.find((t) => t.name === anonymousName) ?? null;
    if (anonymous === null) {
      throw new TenantConfigError('anonymous_tenant', `no tenant is named "${anonymousName}"`);
    }
  }
  options.logger?.info(
    `tenant: ${tenants.length} tenants, ${digests.length} keys` +
      (anonymous === null ? '' : `, anonymous requests served as "${anonymous.name}"`),
  );
  return new TenantTable(tenants, anonymous, digests, owners, options.logger ?? null);
}

function keyDigest(
  key: TenantKeyConfig,
  path: string,
  tenant: string,
  env: Readonly<Record<string, string | undefined>>,
): Buffer {
  if ('env' in key) {
    if (typeof key.env !== 'string' || key.env.length === 0) {
      throw new TenantConfigError(`${path}.env`, 'an env key reference needs a variable name');
    }
    const value = env[key.env];
    if (value === undefined || value.length === 0) {
      throw new TenantConfigError(
        `${path}.env`,
        `environment variable ${key.env} (API key of tenant "${tenant}") is not set or empty`,
      );
    }
    if (value.trim() !== value) {
      // A trailing newline from `$(cat keyfile)` would silently make the key unusable.
      throw new TenantConfigError(
        `${path}.env`,
        `environment variable ${key.env} (API key of tenant "${tenant}") has leading or trailing whitespace`,
      );
    }
    return createHash('sha256').update(value, 'utf8').digest();
  }
  if ('sha256' in key) {
    if (typeof key.sha256 !== 'string' || !HEX_DIGEST.test(key.sha256)) {
      throw new TenantConfigError(
        `${path}.sha256`,
        `expected a SHA-256 digest as 64 hex characters (tenant "${tenant}")`,
      );
    }
    return Buffer.from(key.sha256, 'hex');
  }
  throw new TenantConfigError(path, `a key is either { env: NAME } or { sha256: HEX } (tenant "${tenant}")`);
}
