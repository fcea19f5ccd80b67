/**
 * The cross-field rules: names, ports, pool references, node URLs, simulator ports and tenant keys,
 * each reported at the value to change, plus the normalisation a valid config gets.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createClient } from 'redis';
import { parseConfig } from '../../config/loader.js';
import { netReusePort, perThreadFeatures } from '../../config/semantic-checks.js';
import { BASE_LINES, configOf, errorsOf, onlyErrorOf, placesOf, yamlLines } from './config-fixtures.js';

const POOLS = [
  'pools:',
  '  - name: gpu',
  '    nodes: [{url: "http://127.0.0.1:9100"}]',
  '  - name: cpu',
  '    nodes: [{url: "http://127.0.0.1:9200"}]',
] as const;

void describe('routes and pools', () => {
  void it('rejects a route to an undefined pool, listing the defined ones', () => {
    const error = onlyErrorOf(yamlLines(...POOLS, 'routes:', '  - name: all', '    pool: tpu'));
    assert.deepEqual(placesOf([error]), ['8:11 routes[0].pool']);
    assert.equal(error.message, 'unknown pool "tpu" (did you mean "gpu"?); defined pools: gpu, cpu');
  });

  void it('rejects a hash ring over its size limit at points_per_weight, as serve would', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    balance: {kind: consistent-hash, points_per_weight: 10000}',
        '    nodes: [{url: "http://127.0.0.1:9100", weight: 100}, {url: "http://127.0.0.1:9101"}]',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf([error]), ['3:57 pools[0].balance.points_per_weight']);
    assert.match(error.message, /1010000 points \(at most 262144\): lower balance\.points_per_weight/);
    const fits = configOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    balance: {kind: cache-aware, points_per_weight: 1000}',
        '    nodes: [{url: "http://127.0.0.1:9100", weight: 100}, {url: "http://127.0.0.1:9101"}]',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    assert.equal(fits.pools[0]!.balance.points_per_weight, 1000);
  });

  void it('rejects an address that is neither an IP address nor a host name', () => {
    const errors = errorsOf(
      yamlLines(
        'listeners: [{name: public, address: 999.1.1.1, port: 8080}]',
        'admin: {address: "not an address", port: 9901}',
        ...POOLS,
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf(errors), ['1:37 listeners[0].address', '2:18 admin.address']);
    assert.match(errors[0]!.message, /"999\.1\.1\.1" is not a valid IPv4 address/);
    assert.match(errors[1]!.message, /is neither an IP address nor a host name/);
    configOf(
      yamlLines(
        'listeners: [{name: public, address: "::1", port: 8080}, {name: b, address: my_svc, port: 8081}]',
        'admin: {address: host.example., port: 9901}',
        ...POOLS,
        'routes: [{name: all, pool: gpu}]',
      ),
    );
  });

  void it('rejects duplicate pool names at the second one', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        '  - name: gpu',
        '    nodes: [{url: "http://127.0.0.1:9200"}]',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf([error]), ['4:11 pools[1].name']);
    assert.equal(error.message, 'duplicate pool name "gpu": pools[0] already uses it');
  });

  void it('rejects duplicate route and listener names', () => {
    const errors = errorsOf(
      yamlLines(
        ...BASE_LINES,
        '  - name: all',
        '    pool: gpu',
        'listeners:',
        '  - {name: web, port: 8080}',
        '  - {name: web, port: 8081}',
      ),
    );
    assert.deepEqual(placesOf(errors), ['8:11 routes[1].name', '12:12 listeners[1].name']);
    assert.equal(errors[0]!.message, 'duplicate route name "all": routes[0] already uses it');
    assert.equal(errors[1]!.message, 'duplicate listener name "web": listeners[0] already uses it');
  });

  void it('rejects connections_per_node below an in-flight limit, and accepts it at or above', () => {
    const pool = (...extra: string[]): string =>
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        ...extra.map((l) => `    ${l}`),
        'routes: [{name: all, pool: gpu}]',
      );
    const breaker = onlyErrorOf(pool('connections_per_node: 8', 'max_in_flight_per_node: 16'));
    assert.match(breaker.message, /^8 connections per node are fewer than max_in_flight_per_node \(16\)/);
    assert.equal(breaker.path, 'pools[0].connections_per_node');
    const admission = onlyErrorOf(pool('connections_per_node: 8', 'admission: {max_in_flight_per_node: 32}'));
    assert.match(
      admission.message,
      /fewer than admission\.max_in_flight_per_node \(32\).*unseen by admission/,
    );
    configOf(pool('connections_per_node: 16', 'max_in_flight_per_node: 16'));
    configOf(pool('max_in_flight_per_node: 16'));
  });

  void it('rejects a route with both path and path_prefix, at the second key', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '    match: {path: /v1/models, path_prefix: /v1/}'));
    assert.deepEqual(placesOf([error]), ['8:31 routes[0].match.path_prefix']);
    assert.equal(error.message, 'give either path (exact) or path_prefix, not both');
  });
});

void describe('ports', () => {
  void it('rejects two listeners on one port but allows several on port 0', () => {
    const errors = errorsOf(
      yamlLines(
        ...BASE_LINES,
        'listeners:',
        '  - {name: a, port: 8080}',
        '  - {name: b, port: 0}',
        '  - {name: c, port: 0}',
        '  - {name: d, port: 8080}',
      ),
    );
    assert.deepEqual(placesOf(errors), ['12:21 listeners[3].port']);
    assert.equal(errors[0]!.message, 'port 8080 is already used by listener "a" (listeners[0])');
  });

  void it('accepts TLS on listeners of both engines', () => {
    const config = configOf(
      yamlLines(
        ...BASE_LINES,
        'listeners:',
        '  - {name: a, port: 0, tls: {cert_file: a.crt, key_file: a.key}}',
        '  - {name: b, port: 0, pipelining: 4, tls: {cert_file: b.crt, key_file: b.key}}',
      ),
    );
    assert.deepEqual(
      config.listeners.map((l) => [l.name, l.pipelining, l.tls?.cert_file]),
      [
        ['a', 0, 'a.crt'],
        ['b', 4, 'b.crt'],
      ],
    );
  });

  void it('rejects an admin port equal to a listener port, at admin.port when it is written', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'admin:', '  port: 8080'));
    assert.deepEqual(placesOf([error]), ['9:9 admin.port']);
    assert.equal(
      error.message,
      'port 8080 is also used by listener "public" (listeners[0]); the admin API needs a port of its own',
    );
  });

  void it('points at the listener when it takes the default admin port', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'listeners:', '  - name: public', '    port: 9901'));
    assert.deepEqual(placesOf([error]), ['10:11 listeners[0].port']);
    assert.equal(
      error.message,
      "port 9901 is the admin API's default port; pick another port or set admin.port",
    );
  });

  void it('rejects simulator ports that overlap a listener or the admin API', () => {
    const errors = errorsOf(yamlLines(...BASE_LINES, 'simulator:', '  nodes: 4', '  port: 8078'));
    assert.deepEqual(placesOf(errors), ['10:9 simulator.port']);
    assert.equal(
      errors[0]!.message,
      'the simulator\'s ports 8078-8081 include port 8080 of listener "public" (listeners[0])',
    );
    const admin = onlyErrorOf(yamlLines(...BASE_LINES, 'simulator: {nodes: 2, port: 9900}'));
    assert.equal(
      admin.message,
      "the simulator's ports 9900-9901 include port 9901 of the admin API (admin.port)",
    );
  });

  void it('rejects simulator ports past 65535', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'simulator: {nodes: 8, port: 65530}'));
    assert.deepEqual(placesOf([error]), ['8:29 simulator.port']);
    assert.equal(error.message, "the simulator's 8 nodes would need ports 65530-65537, past 65535");
  });
});

void describe('node URLs', () => {
  void it('rejects a URL whose port is out of range', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://10.0.0.7:80000',
        'routes: [{name: r, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf([error]), ['4:14 pools[0].nodes[0].url']);
    assert.equal(
      error.message,
      'must be a base URL like http://10.0.0.7:8000 (got "http://10.0.0.7:80000": the port is above 65535)',
    );
  });

  void it('rejects the same node twice in a pool, however it is spelt', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://gpu-1:8000',
        '      - url: http://GPU-1:8000/',
        'routes: [{name: r, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf([error]), ['5:14 pools[0].nodes[1].url']);
    assert.equal(error.message, 'node http://gpu-1:8000 is listed twice in pool "gpu" (also at nodes[0])');
  });

  void it('allows the same node in two pools', () => {
    const config = configOf(
      yamlLines(
        'pools:',
        '  - {name: a, nodes: [{url: "http://10.0.0.7:8000"}]}',
        '  - {name: b, nodes: [{url: "http://10.0.0.7:8000"}]}',
        'routes: [{name: r, pool: a}]',
      ),
    );
    assert.equal(config.pools.length, 2);
  });
});

void describe('redis URLs', () => {
  const rateLimits = (url: string): string =>
    yamlLines(...BASE_LINES, 'rate_limits:', '  store: redis', `  redis: { url: "${url}" }`);
  const jobs = (url: string): string =>
    yamlLines(...BASE_LINES, 'batch_api:', '  jobs:', '    store: redis', `    redis: { url: "${url}" }`);
  const pluginStore = (url: string): string =>
    yamlLines(...BASE_LINES, 'plugin_store:', '  store: redis', `  redis: { url: "${url}" }`);

  void it('rejects a port out of range, a missing host and a path that is no database number', () => {
    const port = onlyErrorOf(rateLimits('redis://127.0.0.1:99999'));
    assert.deepEqual(placesOf([port]), ['10:17 rate_limits.redis.url']);
    assert.equal(
      port.message,
      'must be a URL like redis://:password@10.0.0.5:6379/0 (got "redis://127.0.0.1:99999": the port is above 65535)',
    );
    const host = onlyErrorOf(jobs('redis://'));
    assert.deepEqual(placesOf([host]), ['11:19 batch_api.jobs.redis.url']);
    assert.match(host.message, /\(got "redis:\/\/": it has no host\)$/);
    const db = onlyErrorOf(pluginStore('redis://cache:6379/jobs'));
    assert.deepEqual(placesOf([db]), ['10:17 plugin_store.redis.url']);
    assert.match(db.message, /the path must be a database number like \/0 \(got \/jobs\)/);
  });

  void it('rejects a password with a raw special character, says to percent-encode it and never quotes it', () => {
    for (const config of [rateLimits('redis://:p#ss@127.0.0.1:6379'), jobs('redis://:p/ss@127.0.0.1:6379')]) {
      const error = onlyErrorOf(config);
      assert.match(error.message, /not a valid URL; percent-encode special characters .*# as %23/);
      assert.match(error.message, /redis:\/\/:\*\*\*\*@127\.0\.0\.1:6379/);
      assert.doesNotMatch(error.message, /p#ss|p\/ss/);
    }
  });

  void it('accepts exactly the URLs the Redis client accepts', () => {
    const urls = [
      'redis://127.0.0.1:6379',
      'rediss://user:pw@cache.internal',
      'redis://:p%23ss@127.0.0.1:6379/2',
      'redis://[::1]:6379/0',
      'redis://127.0.0.1:99999',
      'redis://:p#ss@127.0.0.1:6379',
      'redis://:p/ss@127.0.0.1:6379',
      'redis://cache:6379/jobs',
      'redis://:p%zz@cache:6379',
    ];
    for (const url of urls) {
      let clientAccepts = true;
      try {
        createClient({ url });
      } catch {
        clientAccepts = false;
      }
      const result = parseConfig(rateLimits(url), 'test.yaml');
      assert.equal(result.ok, clientAccepts, `${url}: check says ${result.ok}, the client ${clientAccepts}`);
    }
  });
});

const DIGEST_A = 'a'.repeat(64);
const DIGEST_B = 'b'.repeat(64);

void describe('tenants', () => {
  void it('rejects two tenants with the same key digest, at the later key, however it is spelt', () => {
    const error = onlyErrorOf(
      yamlLines(
        ...BASE_LINES,
        'tenants:',
        '  - name: a',
        `    keys: [{sha256: ${DIGEST_A}}]`,
        '  - name: b',
        `    keys: [{sha256: ${DIGEST_B}}, {sha256: ${DIGEST_A.toUpperCase()}}]`,
      ),
    );
    assert.deepEqual(placesOf([error]), ['12:88 tenants[1].keys[1]']);
    assert.equal(error.message, 'tenant "b" uses the same key as tenants[0].keys[0] (tenant "a")');
  });

  void it('rejects a key given twice to one tenant, and one environment variable for two tenants', () => {
    const errors = errorsOf(
      yamlLines(
        ...BASE_LINES,
        'tenants:',
        '  - name: a',
        '    keys:',
        `      - sha256: ${DIGEST_A}`,
        `      - sha256: ${DIGEST_A}`,
        '      - env: KEY_A',
        '  - name: b',
        '    keys: [{env: KEY_A}]',
      ),
    );
    assert.deepEqual(placesOf(errors), ['12:9 tenants[0].keys[1]', '15:12 tenants[1].keys[0]']);
    assert.equal(errors[0]!.message, 'tenant "a" uses the same key as tenants[0].keys[0] (tenant "a")');
    assert.equal(errors[1]!.message, 'tenant "b" uses the same key as tenants[0].keys[2] (tenant "a")');
  });

  void it('accepts different keys, and keys from different variables (compared at startup)', () => {
    const config = configOf(
      yamlLines(
        ...BASE_LINES,
        'tenants:',
        `  - {name: a, keys: [{sha256: ${DIGEST_A}}, {env: KEY_A}]}`,
        `  - {name: b, keys: [{sha256: ${DIGEST_B}}, {env: KEY_B}]}`,
      ),
    );
    assert.equal(config.tenants?.length, 2);
  });

  void it('rejects a tenant without keys unless it is the anonymous tenant', () => {
    const error = onlyErrorOf(
      yamlLines(
        ...BASE_LINES,
        'tenants:',
        '  - name: a',
        '    keys: []',
        '  - name: public',
        '    keys: []',
        'anonymous_tenant: public',
      ),
    );
    assert.deepEqual(placesOf([error]), ['10:11 tenants[0].keys']);
    assert.equal(error.message, 'tenant "a" has no keys (only the anonymous tenant may)');
  });
});

void describe('normalisation', () => {
  void it('stores node URLs as origins and hosts in lower case, and drops version', () => {
    const config = configOf(
      yamlLines(
        'version: 1',
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://GPU-1.Example.com:8000/',
        '      - url: https://[::1]:8443',
        '      - url: http://10.0.0.9:80',
        'routes:',
        '  - name: all',
        '    pool: gpu',
        '    match: {host: API.Example.COM}',
      ),
    );
    assert.deepEqual(
      config.pools[0]!.nodes.map((n) => n.url),
      ['http://gpu-1.example.com:8000', 'https://[::1]:8443', 'http://10.0.0.9'],
    );
    assert.equal(config.routes[0]!.match.host, 'api.example.com');
    assert.equal('version' in config, false);
  });
});

void describe('server.workers', () => {
  void it('accepts workers with features whose state the threads share', () => {
    const c = configOf(
      yamlLines(
        'server: {workers: 4}',
        'listeners: [{name: public, address: 127.0.0.1, port: 8080, max_connections: 100}]',
        'pools:',
        '  - name: gpu',
        '    max_in_flight_per_node: 64',
        '    admission: {max_in_flight_per_node: 8, max_queue: 100}',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        'routes: [{name: all, pool: gpu}]',
        'rate_limits: {defaults: {requests_per_minute: 60, tokens_per_minute: 9000, max_concurrent: 4}}',
      ),
    );
    assert.equal(c.server.workers, 4);
    assert.equal(configOf(yamlLines(...BASE_LINES)).server.workers, 'auto', 'the default');
    assert.equal(configOf(yamlLines('server: {workers: auto}', ...BASE_LINES)).server.workers, 'auto');
  });

  void it('refuses only what a thread would keep for itself, and serves the shared features', () => {
    // From Node 22.12 the own engine shares its port (the next test): no error for pipelining there.
    const ownEngine = !netReusePort();
    const text = yamlLines(
      'server: {workers: 2}',
      `listeners: [{name: public, address: 127.0.0.1, port: 8080, pipelining: ${ownEngine ? 16 : 0}}]`,
      'pools:',
      '  - name: gpu',
      '    admission: {max_in_flight_per_node: 8, reserve_per_node: 1, adaptive: {}}',
      '    nodes: [{url: "http://127.0.0.1:9100"}]',
      'routes: [{name: all, match: {path: /v1/embeddings}, pool: gpu, batching: {mode: fanout}}]',
    );
    if (!ownEngine) {
      // reserve_per_node (decided by the main thread's controller for every thread), the adaptive
      // limit (its state in the threads' table) and micro-batching (the main thread batches every
      // thread's items) are all served by a number of threads.
      assert.equal(configOf(text).server.workers, 2);
      return;
    }
    const errors = errorsOf(text);
    assert.deepEqual(placesOf(errors), ['2:60 listeners[0].pipelining']);
    assert.match(
      errors[0]!.message,
      /^listener "public" on Sluice's own HTTP\/1\.1 engine .* needs Node 22\.12 or later on Linux, this is [\d.]+ on \w+\) is not shared across worker threads yet, so server\.workers 2 cannot serve it; set pipelining to 0/,
    );
    // With the pipelining gone, the rest is served by two threads.
    assert.equal(configOf(text.replace('pipelining: 16', 'pipelining: 0')).server.workers, 2);
  });

  void it('refuses workers beyond 64, below 1 or other than auto by the schema, in one message', () => {
    for (const [v, got] of [
      ['0', '0'],
      ['65', '65'],
      ['2.5', '2.5'],
      ['many', '"many"'],
      ['true', 'true'],
    ] as const) {
      const e = onlyErrorOf(yamlLines(`server: {workers: ${v}}`, ...BASE_LINES));
      assert.equal(e.path, 'server.workers');
      assert.equal(e.message, `must be auto or a number of threads from 1 to 64 (got ${got})`);
    }
  });

  void it('tells the own engine apart by the Node version: reusePort from 22.12 and 23.1', () => {
    assert.equal(netReusePort('20.20.2', 'linux'), false);
    assert.equal(netReusePort('22.11.0', 'linux'), false);
    assert.equal(netReusePort('22.12.0', 'linux'), true);
    assert.equal(netReusePort('23.0.0', 'linux'), false);
    assert.equal(netReusePort('23.1.0', 'linux'), true);
    assert.equal(netReusePort('24.0.0', 'linux'), true);
    assert.equal(netReusePort('24.0.0', 'darwin'), false, 'macOS binds but does not spread');
    assert.equal(netReusePort('24.0.0', 'win32'), false);
    const data = {
      listeners: [{ name: 'public', pipelining: 16 }],
      pools: [{ name: 'gpu', balance: { kind: 'round-robin' } }],
      routes: [],
    };
    assert.deepEqual(
      perThreadFeatures(data, false).map((f) => f.path.join('.')),
      ['listeners.0.pipelining'],
    );
    assert.deepEqual(perThreadFeatures(data, true), []);
  });

  void it('accepts a number of threads with a policy that learns per thread; auto counts it', () => {
    const lines = (workers: string): string =>
      yamlLines(
        `server: {workers: ${workers}}`,
        'listeners: [{name: public, address: 127.0.0.1, port: 8080}]',
        'pools:',
        '  - name: gpu',
        '    balance: {kind: cache-aware}',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        '  - name: other',
        '    balance: {kind: least-response-time}',
        '    nodes: [{url: "http://127.0.0.1:9101"}]',
        'routes: [{name: all, pool: gpu}, {name: o, match: {path: /o}, pool: other}]',
      );
    assert.equal(configOf(lines('2')).server.workers, 2);
    const features = perThreadFeatures(configOf(lines('auto')) as unknown as Record<string, unknown>);
    assert.deepEqual(
      features.map((f) => [f.path.join('.'), f.learnsPerThread]),
      [
        ['pools.0.balance.kind', true],
        ['pools.1.balance.kind', true],
      ],
    );
    assert.match(
      features[0]!.what,
      /^pool "gpu"'s cache-aware balancing \(its prefix index and the prefill queue/,
    );
  });
});
