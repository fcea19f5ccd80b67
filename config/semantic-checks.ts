/**
 * The rules JSON Schema cannot state: unique names and ports, routes naming defined pools, node URLs
 * that really parse, simulator ports clear of the listeners, tenants with keys of their own. Runs on
 * the defaults-applied data even when the schema failed, so it reads every value defensively and
 * skips what the schema rejected.
 */
import { isIP } from 'node:net';
import { SharedKeyFinder, tenantKeysProblem } from '../proxy/tenant/tenant-table.js';
import { MAX_RING_POINTS, ringPoints, ringTooLarge } from '../proxy/balance/hash-ring.js';
import { formatConfigPath, type ConfigIssue, type ConfigPath } from './config-issue.js';
import { maskUrlPasswords } from './schema-errors.js';
import { suggestClosest } from './suggest.js';

/** What the checks may ask about the file itself (not the defaulted data). */
export interface SourceView {
  /** True when the key at `path` is written in the file, false when a default filled it in. */
  has(path: ConfigPath): boolean;
}

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The entries of a list that are mappings, with their indexes. */
function entries(value: unknown): [number, Json][] {
  if (!Array.isArray(value)) return [];
  const out: [number, Json][] = [];
  value.forEach((item: unknown, index) => {
    if (isRecord(item)) out.push([index, item]);
  });
  return out;
}

function text(record: Json, key: string): string | undefined {
  const value = record[key];
  return typeof value === 'string' ? value : undefined;
}

function port(record: Json, key = 'port'): number | undefined {
  const value = record[key];
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 65535
    ? value
    : undefined;
}

function checkUniqueNames(data: Json, section: string, noun: string, issues: ConfigIssue[]): void {
  const first = new Map<string, number>();
  for (const [index, entry] of entries(data[section])) {
    const name = text(entry, 'name');
    if (name === undefined) continue;
    const earlier = first.get(name);
    if (earlier === undefined) {
      first.set(name, index);
      continue;
    }
    issues.push({
      path: [section, index, 'name'],
      anchor: 'value',
      message: `duplicate ${noun} name ${JSON.stringify(name)}: ${section}[${earlier}] already uses it`,
    });
  }
}

function checkPoolRef(
  name: string | undefined,
  pools: string[],
  path: ConfigPath,
  issues: ConfigIssue[],
): void {
  if (name === undefined || pools.includes(name)) return;
  const closest = suggestClosest(name, pools);
  const suggestion = closest === undefined ? '' : ` (did you mean ${JSON.stringify(closest)}?)`;
  issues.push({
    path,
    anchor: 'value',
    message: `unknown pool ${JSON.stringify(name)}${suggestion}; defined pools: ${pools.join(', ')}`,
  });
}

/** An affinity source names what it needs: header → name, body_field → field. */
function checkAffinity(data: Json, issues: ConfigIssue[]): void {
  for (const [index, pool] of entries(data['pools'])) {
    const balance = pool['balance'];
    if (!isRecord(balance) || !isRecord(balance['affinity'])) continue;
    const affinity = balance['affinity'];
    const need =
      affinity['source'] === 'header' ? 'name' : affinity['source'] === 'body_field' ? 'field' : null;
    if (need !== null && affinity[need] === undefined) {
      issues.push({
        path: ['pools', index, 'balance', 'affinity'],
        anchor: 'value',
        message: `affinity source ${String(affinity['source'])} needs ${need}`,
      });
    }
  }
}

/**
 * Why `address` cannot be an address to bind, or undefined: an IP literal, or something shaped
 * like a host name (letters, digits, `-`, `_`, dots, an optional trailing dot). Whether a name
 * resolves is found only when binding.
 */
function addressProblem(address: string): string | undefined {
  if (isIP(address) !== 0) return undefined;
  if (/^[\d.]+$/.test(address)) return 'is not a valid IPv4 address';
  if (!/^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$/.test(address))
    return 'is neither an IP address nor a host name';
  return undefined;
}

/** Every address Sluice binds (listeners, admin, simulator) is an IP address or a host name. */
function checkAddresses(data: Json, issues: ConfigIssue[]): void {
  const check = (section: unknown, path: ConfigPath): void => {
    if (!isRecord(section)) return;
    const a = text(section, 'address');
    const problem = a === undefined ? undefined : addressProblem(a);
    if (problem !== undefined)
      issues.push({
        path: [...path, 'address'],
        anchor: 'value',
        message: `${JSON.stringify(a)} ${problem}`,
      });
  };
  for (const [index, listener] of entries(data['listeners'])) check(listener, ['listeners', index]);
  check(data['admin'], ['admin']);
  check(data['simulator'], ['simulator']);
}

/** A pool balanced on a hash ring (consistent-hash, cache-aware) fits the ring's size limit. */
function checkRingSize(data: Json, issues: ConfigIssue[]): void {
  for (const [index, pool] of entries(data['pools'])) {
    const balance = pool['balance'];
    if (!isRecord(balance) || (balance['kind'] !== 'consistent-hash' && balance['kind'] !== 'cache-aware'))
      continue;
    const ppw = typeof balance['points_per_weight'] === 'number' ? balance['points_per_weight'] : undefined;
    const weights = entries(pool['nodes']).map(([, n]) =>
      typeof n['weight'] === 'number' ? n['weight'] : 1,
    );
    const total = ringPoints(weights, ppw);
    if (total > MAX_RING_POINTS) {
      issues.push({
        path: ['pools', index, 'balance', ...(ppw === undefined ? [] : ['points_per_weight'])],
        anchor: 'value',
        message: ringTooLarge(total),
      });
    }
  }
}

const NEEDS_ANONYMOUS =
  'allow_anonymous needs anonymous_tenant: name the tenant that requests without a key are served as';

const PERCENT_ENCODE =
  'percent-encode special characters of the user and password (# as %23, / as %2F, ? as %3F, @ as %40, % as %25)';

/**
 * Why `url` is not a Redis URL the client can use, or undefined when it is one (or when it lacks the
 * `redis://` scheme, which the schema reports). The client reads it with `new URL`, so a password
 * with a raw `#` or `/` fails there (`serve` then stopped with only "Invalid URL"), and an empty
 * host silently meant 127.0.0.1:6379.
 */
function redisUrlProblem(url: string): string | undefined {
  if (!/^rediss?:\/\//.test(url)) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    const portText = /:(\d+)(\/\d*)?$/.exec(url)?.[1];
    if (portText !== undefined && Number(portText) > 65535) return 'the port is above 65535';
    return `not a valid URL; ${PERCENT_ENCODE}`;
  }
  if (parsed.hostname === '') return 'it has no host';
  if (parsed.port === '0') return 'the port must be from 1 to 65535';
  if (parsed.pathname.length > 1 && !/^\/\d+$/.test(parsed.pathname))
    return `the path must be a database number like /0 (got ${parsed.pathname})`;
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
  } catch {
    return `the user or password is not valid percent-encoding; ${PERCENT_ENCODE}`;
  }
  return undefined;
}

/**
 * A section with `store: redis` (rate limits, batch jobs, plugin store) has its `redis` connection,
 * and its url is one the Redis client can use.
 */
function checkRedisStore(section: unknown, path: ConfigPath, issues: ConfigIssue[]): void {
  if (!isRecord(section)) return;
  const redis = section['redis'];
  if (section['store'] === 'redis' && !isRecord(redis)) {
    issues.push({ path, anchor: 'value', message: 'store redis needs a redis section with its url' });
    return;
  }
  const url = isRecord(redis) ? text(redis, 'url') : undefined;
  if (url === undefined) return;
  const problem = redisUrlProblem(url);
  if (problem === undefined) return;
  issues.push({
    path: [...path, 'redis', 'url'],
    anchor: 'value',
    message: `must be a URL like redis://:password@10.0.0.5:6379/0 (got ${JSON.stringify(maskUrlPasswords(url))}: ${problem})`,
  });
}

const HEX_DIGEST = /^[0-9a-fA-F]{64}$/;

/**
 * Every tenant but the anonymous one has keys, and no key belongs to two tenants (or twice to one):
 * the rules `compileTenants` applies at startup, here with what the file shows. Two `sha256` keys
 * are the same key when their digests are; two `env` keys when they name the same variable. An
 * `env` key equal to a digest is only found at startup, where the variable is read.
 */
function checkTenantKeys(data: Json, anonymous: string | undefined, issues: ConfigIssue[]): void {
  const shared = new SharedKeyFinder();
  for (const [index, tenant] of entries(data['tenants'])) {
    const name = text(tenant, 'name');
    const keys = tenant['keys'];
    if (name === undefined || !Array.isArray(keys)) continue;
    const keyless = tenantKeysProblem(name, keys.length, name === anonymous);
    if (keyless !== undefined) {
      issues.push({ path: ['tenants', index, 'keys'], anchor: 'value', message: keyless });
    }
    for (const [k, key] of entries(keys)) {
      const digest = text(key, 'sha256');
      const variable = text(key, 'env');
      const id =
        digest !== undefined && HEX_DIGEST.test(digest)
          ? digest.toLowerCase()
          : variable !== undefined
            ? `env ${variable}`
            : undefined;
      if (id === undefined) continue;
      const path = ['tenants', index, 'keys', k];
      const clash = shared.add(id, formatConfigPath(path), name);
      if (clash !== undefined) issues.push({ path, anchor: 'value', message: clash });
    }
  }
}

/** Tenant names are unique, the anonymous tenant exists, and what needs it is configured. */
function checkTenants(data: Json, issues: ConfigIssue[]): void {
  const names = entries(data['tenants']).flatMap(([, t]) => text(t, 'name') ?? []);
  const anonymous = text(data, 'anonymous_tenant');
  checkTenantKeys(data, anonymous, issues);
  if (anonymous !== undefined && !names.includes(anonymous)) {
    issues.push({
      path: ['anonymous_tenant'],
      anchor: 'value',
      message: `unknown tenant ${JSON.stringify(anonymous)}; defined tenants: ${names.join(', ') || '(none)'}`,
    });
  }
  for (const [index, route] of entries(data['routes'])) {
    if (route['allow_anonymous'] === true && anonymous === undefined) {
      issues.push({ path: ['routes', index, 'allow_anonymous'], anchor: 'value', message: NEEDS_ANONYMOUS });
    }
  }
  checkRedisStore(data['rate_limits'], ['rate_limits'], issues);
}

/** The batch API: a Redis job store has its url; anonymous callers need the anonymous tenant. */
function checkBatchApi(data: Json, issues: ConfigIssue[]): void {
  const api = data['batch_api'];
  if (!isRecord(api)) return;
  checkRedisStore(api['jobs'], ['batch_api', 'jobs'], issues);
  if (api['allow_anonymous'] === true && text(data, 'anonymous_tenant') === undefined) {
    issues.push({ path: ['batch_api', 'allow_anonymous'], anchor: 'value', message: NEEDS_ANONYMOUS });
  }
}

/** Every pool a route names (pool, split, fallback, mirror) exists; a route has pool or split. */
function checkRoutePools(data: Json, issues: ConfigIssue[]): void {
  const pools = [...new Set(entries(data['pools']).flatMap(([, pool]) => text(pool, 'name') ?? []))];
  for (const [index, route] of entries(data['routes'])) {
    const hasPool = route['pool'] !== undefined;
    const hasSplit = route['split'] !== undefined;
    if (hasPool === hasSplit) {
      issues.push({
        path: ['routes', index],
        anchor: 'value',
        message: hasPool
          ? 'give either pool or split, not both'
          : 'missing pool: name the pool that serves the route (or a split across pools)',
      });
    }
    if (pools.length === 0) continue;
    checkPoolRef(text(route, 'pool'), pools, ['routes', index, 'pool'], issues);
    for (const [i, entry] of entries(route['split'])) {
      checkPoolRef(text(entry, 'pool'), pools, ['routes', index, 'split', i, 'pool'], issues);
    }
    const fallback = route['fallback'];
    if (Array.isArray(fallback)) {
      fallback.forEach((name: unknown, i) => {
        if (typeof name === 'string') checkPoolRef(name, pools, ['routes', index, 'fallback', i], issues);
      });
    }
    const mirror = route['mirror'];
    if (isRecord(mirror))
      checkPoolRef(text(mirror, 'pool'), pools, ['routes', index, 'mirror', 'pool'], issues);
    if (route['pin_header'] !== undefined && !hasSplit) {
      issues.push({
        path: ['routes', index, 'pin_header'],
        anchor: 'key',
        message: 'pin_header needs a split',
      });
    }
    if (route['sticky_header'] !== undefined && !hasSplit) {
      issues.push({
        path: ['routes', index, 'sticky_header'],
        anchor: 'key',
        message: 'sticky_header needs a split',
      });
    }
  }
}

interface PortUser {
  port: number;
  /** Who holds the port, for messages: `listener "public" (listeners[0])`. */
  label: string;
  /** Where the port is set. */
  path: ConfigPath;
}

/** Listener ports must differ (0 excepted: each 0 gets its own free port), and differ from admin's. */
function checkListenerPorts(data: Json, view: SourceView, issues: ConfigIssue[]): PortUser[] {
  const used: PortUser[] = [];
  const byPort = new Map<number, PortUser>();
  for (const [index, listener] of entries(data['listeners'])) {
    const value = port(listener);
    if (value === undefined || value === 0) continue;
    const label = `listener ${JSON.stringify(text(listener, 'name') ?? '')} (listeners[${index}])`;
    const earlier = byPort.get(value);
    if (earlier !== undefined) {
      issues.push({
        path: ['listeners', index, 'port'],
        anchor: 'value',
        message: `port ${value} is already used by ${earlier.label}`,
      });
      continue;
    }
    const user = { port: value, label, path: ['listeners', index, 'port'] };
    byPort.set(value, user);
    used.push(user);
  }
  const admin = isRecord(data['admin']) ? port(data['admin']) : undefined;
  if (admin === undefined || admin === 0) return used;
  const clash = byPort.get(admin);
  if (clash !== undefined) {
    if (view.has(['admin', 'port'])) {
      issues.push({
        path: ['admin', 'port'],
        anchor: 'value',
        message: `port ${admin} is also used by ${clash.label}; the admin API needs a port of its own`,
      });
    } else {
      issues.push({
        path: clash.path,
        anchor: 'value',
        message: `port ${admin} is the admin API's default port; pick another port or set admin.port`,
      });
    }
  }
  used.push({ port: admin, label: 'the admin API (admin.port)', path: ['admin', 'port'] });
  return used;
}

/** Why `url` is not a usable node base URL, or undefined when it is one. */
function nodeUrlProblem(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    const portText = /:(\d+)\/?$/.exec(url)?.[1];
    return portText !== undefined && Number(portText) > 65535 ? 'the port is above 65535' : 'not a valid URL';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return 'the scheme must be http or https';
  if (parsed.username !== '' || parsed.password !== '') return 'it must not carry a user name or password';
  if (parsed.pathname !== '/') return `it must not have a path (${parsed.pathname})`;
  if (parsed.search !== '' || parsed.hash !== '') return 'it must not have a query or fragment';
  return undefined;
}

function checkNodes(data: Json, issues: ConfigIssue[]): void {
  for (const [poolIndex, pool] of entries(data['pools'])) {
    const seen = new Map<string, number>();
    for (const [index, node] of entries(pool['nodes'])) {
      const url = text(node, 'url');
      if (url === undefined) continue;
      const path = ['pools', poolIndex, 'nodes', index, 'url'];
      const problem = nodeUrlProblem(url);
      if (problem !== undefined) {
        issues.push({
          path,
          anchor: 'value',
          message: `must be a base URL like http://10.0.0.7:8000 (got ${JSON.stringify(maskUrlPasswords(url))}: ${problem})`,
        });
        continue;
      }
      const origin = new URL(url).origin;
      const earlier = seen.get(origin);
      if (earlier === undefined) {
        seen.set(origin, index);
        continue;
      }
      const poolName = JSON.stringify(text(pool, 'name') ?? '');
      issues.push({
        path,
        anchor: 'value',
        message: `node ${origin} is listed twice in pool ${poolName} (also at nodes[${earlier}])`,
      });
    }
  }
}

/**
 * An explicit `connections_per_node` below a pool's in-flight limit would park requests inside the
 * connection pool, where no admission queue, deadline or metric sees them.
 */
function checkConnections(data: Json, issues: ConfigIssue[]): void {
  for (const [index, pool] of entries(data['pools'])) {
    const connections = pool['connections_per_node'];
    if (typeof connections !== 'number') continue;
    const admission = pool['admission'];
    const limits: [string, unknown][] = [
      [
        'admission.max_in_flight_per_node',
        isRecord(admission) ? admission['max_in_flight_per_node'] : undefined,
      ],
      ['max_in_flight_per_node', pool['max_in_flight_per_node']],
    ];
    for (const [name, limit] of limits) {
      if (typeof limit !== 'number' || limit <= connections) continue;
      issues.push({
        path: ['pools', index, 'connections_per_node'],
        anchor: 'value',
        message:
          `${connections} connections per node are fewer than ${name} (${limit}): requests beyond ${connections} ` +
          'would wait inside the connection pool, unseen by admission, deadlines and metrics; raise it to ' +
          `at least ${limit} or remove it (it then follows the in-flight limit)`,
      });
    }
  }
}

function checkRouteMatches(data: Json, issues: ConfigIssue[]): void {
  for (const [index, route] of entries(data['routes'])) {
    const match = route['match'];
    if (isRecord(match) && 'path' in match && 'path_prefix' in match) {
      issues.push({
        path: ['routes', index, 'match', 'path_prefix'],
        anchor: 'key',
        message: 'give either path (exact) or path_prefix, not both',
      });
    }
    // A micro-batch call goes to one path: without an exact match path, requests to other paths
    // would be answered by that endpoint.
    const batching = route['batching'];
    if (isRecord(batching) && !('upstream_path' in batching) && !(isRecord(match) && 'path' in match)) {
      issues.push({
        path: ['routes', index, 'batching'],
        anchor: 'key',
        message:
          'a batching route needs match.path (an exact path) or batching.upstream_path: every micro-batch call goes to that one path',
      });
    }
  }
}

/** The simulator takes ports [port, port + nodes); they must exist and be free of Sluice's own. */
function checkSimulatorPorts(data: Json, used: readonly PortUser[], issues: ConfigIssue[]): void {
  const simulator = data['simulator'];
  if (!isRecord(simulator)) return;
  const first = port(simulator);
  const count = simulator['nodes'];
  if (
    first === undefined ||
    first === 0 ||
    typeof count !== 'number' ||
    !Number.isInteger(count) ||
    count < 1
  ) {
    return;
  }
  const last = first + count - 1;
  const path = ['simulator', 'port'];
  if (last > 65535) {
    issues.push({
      path,
      anchor: 'value',
      message: `the simulator's ${count} nodes would need ports ${first}-${last}, past 65535`,
    });
    return;
  }
  for (const user of used) {
    if (user.port < first || user.port > last) continue;
    issues.push({
      path,
      anchor: 'value',
      message: `the simulator's ports ${first}-${last} include port ${user.port} of ${user.label}`,
    });
  }
}

/** Plugin instance names a listener or route lists are declared under plugins. */
function checkPluginRefs(data: Json, issues: ConfigIssue[]): void {
  const names = entries(data['plugins']).flatMap(([, p]) => text(p, 'name') ?? []);
  for (const section of ['listeners', 'routes']) {
    for (const [index, entry] of entries(data[section])) {
      const list = entry['plugins'];
      if (!Array.isArray(list)) continue;
      list.forEach((name: unknown, i) => {
        if (typeof name !== 'string' || names.includes(name)) return;
        const closest = suggestClosest(name, names);
        const suggestion = closest === undefined ? '' : ` (did you mean ${JSON.stringify(closest)}?)`;
        issues.push({
          path: [section, index, 'plugins', i],
          anchor: 'value',
          message: `unknown plugin instance ${JSON.stringify(name)}${suggestion}; declared under plugins: ${names.join(', ') || '(none)'}`,
        });
      });
    }
  }
  checkRedisStore(data['plugin_store'], ['plugin_store'], issues);
}

/** A feature of a config whose state each thread would keep for itself (`perThreadFeatures`). */
export interface PerThreadFeature {
  path: ConfigPath;
  /** What it is, as the start of a sentence: "pool "gpu"'s cache-aware balancing (...)". */
  what: string;
  /** What to do instead, as a clause: "set pipelining to 0 (uWebSockets.js), or run Node 22.12 ...". */
  instead: string;
  /**
   * True where threads would serve it, but worse than one thread: each thread learns alone, like
   * instances that share nothing. A number of threads accepts it; `auto` keeps one thread for it.
   */
  learnsPerThread?: boolean;
}

/**
 * Whether this Node can bind a `node:net` listener with `SO_REUSEPORT` (`reusePort`, Node 22.12 and
 * 23.1 on, and only where the kernel spreads connections across the sockets: Linux here): without
 * it, Sluice's own HTTP/1.1 engine (`pipelining` > 0) cannot share a port across threads.
 */
export function netReusePort(
  version: string = process.versions.node,
  platform: string = process.platform,
): boolean {
  if (platform !== 'linux') return false;
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return major > 23 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12);
}

/**
 * The features of `data` (the defaults-applied config) that rest on state each thread would keep
 * for itself, so that `server.workers` above 1 cannot serve them: an explicit number of threads is
 * refused with one error each, and `auto` resolves to one thread while any is present.
 */
export function perThreadFeatures(data: Json, reusePort: boolean = netReusePort()): PerThreadFeature[] {
  const out: PerThreadFeature[] = [];
  for (const [i, l] of entries(data['listeners'])) {
    const p = l['pipelining'];
    if (typeof p === 'number' && p > 0 && !reusePort)
      out.push({
        path: ['listeners', i, 'pipelining'],
        what: `listener ${JSON.stringify(l['name'])} on Sluice's own HTTP/1.1 engine (pipelining above 0; sharing its port needs Node 22.12 or later on Linux, this is ${process.versions.node} on ${process.platform})`,
        instead: 'set pipelining to 0 (uWebSockets.js), or run Node 22.12 or later on Linux',
      });
  }
  for (const [i, p] of entries(data['pools'])) {
    const b = p['balance'];
    const kind = isRecord(b) ? b['kind'] : undefined;
    if (kind === 'cache-aware' || kind === 'least-response-time')
      out.push({
        path: ['pools', i, 'balance', 'kind'],
        what: `pool ${JSON.stringify(p['name'])}'s ${kind} balancing (${kind === 'cache-aware' ? 'its prefix index and ' : ''}the prefill queue and node speeds it learns, which each thread would learn from its own requests alone)`,
        instead: 'set server.workers to a number of threads to run it on threads all the same',
        learnsPerThread: true,
      });
  }
  const store = data['plugin_store'];
  const plugins = entries(data['plugins']);
  if (plugins.length > 0 && (!isRecord(store) || store['store'] !== 'redis'))
    out.push({
      path: ['plugins'],
      what: `plugins with the memory plugin store (each thread's store is its own: a count or quota a plugin keeps there would hold once per thread)`,
      instead: 'set plugin_store.store to redis to share it',
      learnsPerThread: true,
    });
  return out;
}

/**
 * `server.workers` set to a number above 1: every thread keeps its own copy of some state still, so
 * the features that rest on such state are refused, one issue each, rather than enforced N times
 * over. (`auto` is not refused: it resolves to one thread where such a feature is present.)
 */
function checkWorkers(data: Json, issues: ConfigIssue[]): void {
  const server = data['server'];
  const workers = isRecord(server) ? server['workers'] : undefined;
  if (typeof workers !== 'number' || workers <= 1) return;
  for (const f of perThreadFeatures(data)) {
    if (f.learnsPerThread === true) continue;
    issues.push({
      path: f.path,
      anchor: 'key',
      message: `${f.what} is not shared across worker threads yet, so server.workers ${workers} cannot serve it; ${f.instead}, or set server.workers to 1 (or auto)`,
    });
  }
}

/**
 * Runs every cross-field rule over the defaults-applied data and returns the problems found, each
 * pointing at the value (or key) to change; an empty list means the rules hold.
 */
export function checkSemantics(data: unknown, view: SourceView): ConfigIssue[] {
  if (!isRecord(data)) return [];
  const issues: ConfigIssue[] = [];
  checkUniqueNames(data, 'listeners', 'listener', issues);
  checkUniqueNames(data, 'pools', 'pool', issues);
  checkUniqueNames(data, 'routes', 'route', issues);
  checkUniqueNames(data, 'tenants', 'tenant', issues);
  checkUniqueNames(data, 'plugins', 'plugin instance', issues);
  checkPluginRefs(data, issues);
  checkTenants(data, issues);
  checkBatchApi(data, issues);
  checkRoutePools(data, issues);
  checkAffinity(data, issues);
  checkRingSize(data, issues);
  checkAddresses(data, issues);
  const used = checkListenerPorts(data, view, issues);
  checkNodes(data, issues);
  checkConnections(data, issues);
  checkRouteMatches(data, issues);
  checkSimulatorPorts(data, used, issues);
  checkWorkers(data, issues);
  return issues;
}
