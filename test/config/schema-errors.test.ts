/**
 * Schema violations: each one is reported at the exact line and column of the offending YAML node,
 * with a message that says what was wrong and what was expected, and all of them at once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatConfigError } from '../../config/loader.js';
import { BASE_LINES, errorsOf, onlyErrorOf, placesOf, yamlLines } from './config-fixtures.js';

const ROOT_KEYS =
  'version, listeners, admin, server, metrics, access_log, tracing, pools, routes, simulator, tenants, anonymous_tenant, rate_limits, batch_api, plugins, plugin_store';

void describe('unknown keys', () => {
  void it('points at the key itself, lists the allowed keys and suggests the closest one', () => {
    const errors = errorsOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://127.0.0.1:9100',
        'route:',
        '  - name: all',
        '    pool: gpu',
      ),
    );
    assert.deepEqual(placesOf(errors), ['1:1 ', '5:1 route']);
    assert.equal(errors[0]!.message, 'missing required key "routes"');
    assert.equal(
      errors[1]!.message,
      `unknown key "route" (did you mean "routes"?); allowed keys: ${ROOT_KEYS}`,
    );
  });

  void it('finds misspelt keys deep in the file, transpositions included', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://127.0.0.1:9100',
        '        wieght: 2',
        'routes:',
        '  - name: all',
        '    pool: gpu',
      ),
    );
    assert.deepEqual(placesOf([error]), ['5:9 pools[0].nodes[0].wieght']);
    assert.equal(error.message, 'unknown key "wieght" (did you mean "weight"?); allowed keys: url, weight');
  });

  void it('suggests the full key for a shortened one and nothing for an unrelated one', () => {
    const errors = errorsOf(yamlLines(...BASE_LINES, '    timeouts: {ttfb: 100}', '    priority: 3'));
    assert.deepEqual(placesOf(errors), ['8:16 routes[0].timeouts.ttfb', '9:5 routes[0].priority']);
    assert.equal(
      errors[0]!.message,
      'unknown key "ttfb" (did you mean "ttfb_ms"?); allowed keys: ttfb_ms, idle_ms, total_ms',
    );
    assert.equal(
      errors[1]!.message,
      'unknown key "priority"; allowed keys: name, match, pool, split, pin_header, sticky_header, fallback, mirror, retries, route_header, timeouts, allow_anonymous, batching, plugins',
    );
  });

  void it('refuses connect_ms on a route, because connections belong to the pool', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '    timeouts: {connect_ms: 100}'));
    assert.deepEqual(placesOf([error]), ['8:16 routes[0].timeouts.connect_ms']);
    assert.equal(error.message, 'unknown key "connect_ms"; allowed keys: ttfb_ms, idle_ms, total_ms');
  });
});

void describe('wrong types and values', () => {
  void it('reports a non-numeric port with the accepted range', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'listeners:', '  - name: public', '    port: 80a'));
    assert.deepEqual(placesOf([error]), ['10:11 listeners[0].port']);
    assert.equal(error.message, 'expected an integer from 0 to 65535, got "80a"');
  });

  void it('reports an out-of-range port', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'admin:', '  port: 70000'));
    assert.deepEqual(placesOf([error]), ['9:9 admin.port']);
    assert.equal(error.message, 'expected an integer from 0 to 65535, got 70000');
  });

  void it('reports a node URL that is not a base URL', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://127.0.0.1:9100',
        '      - url: ftp://x',
        'routes:',
        '  - name: all',
        '    pool: gpu',
      ),
    );
    assert.deepEqual(placesOf([error]), ['5:14 pools[0].nodes[1].url']);
    assert.equal(error.message, 'must be a base URL like http://10.0.0.7:8000 (got "ftp://x")');
  });

  void it('rejects a node URL with a path', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: "http://10.0.0.7:8000/v1"}]',
        'routes: [{name: r, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf([error]), ['3:19 pools[0].nodes[0].url']);
    assert.equal(
      error.message,
      'must be a base URL like http://10.0.0.7:8000 (got "http://10.0.0.7:8000/v1")',
    );
  });

  void it('lists the allowed values of an enum', () => {
    const error = onlyErrorOf(
      yamlLines(...BASE_LINES.slice(0, 4), '    balance: {kind: random}', ...BASE_LINES.slice(4)),
    );
    assert.deepEqual(placesOf([error]), ['5:21 pools[0].balance.kind']);
    assert.equal(
      error.message,
      'must be one of: round-robin, least-request, least-response-time, consistent-hash, cache-aware (got "random")',
    );
  });

  void it('suggests the enum value an operator probably meant', () => {
    const error = onlyErrorOf(
      yamlLines(...BASE_LINES.slice(0, 4), '    balance: {kind: round_robin}', ...BASE_LINES.slice(4)),
    );
    assert.equal(
      error.message,
      'must be one of: round-robin, least-request, least-response-time, consistent-hash, cache-aware (got "round_robin"; did you mean "round-robin"?)',
    );
  });

  void it('reports a negative weight and a fractional timeout with their ranges', () => {
    const errors = errorsOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://127.0.0.1:9100',
        '        weight: -1',
        '    timeouts:',
        '      connect_ms: 1.5',
        'routes:',
        '  - name: all',
        '    pool: gpu',
      ),
    );
    assert.deepEqual(placesOf(errors), [
      '5:17 pools[0].nodes[0].weight',
      '7:19 pools[0].timeouts.connect_ms',
    ]);
    assert.equal(errors[0]!.message, 'expected an integer from 0 to 10000, got -1');
    assert.equal(errors[1]!.message, 'expected an integer from 0 to 86400000, got 1.5');
  });

  void it('says how to write an empty mapping when a section is left empty', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '    match:'));
    assert.deepEqual(placesOf([error]), ['8:5 routes[0].match']);
    assert.equal(error.message, 'expected a mapping, got an empty value (write {} for an empty mapping)');
  });

  void it('reports a list where a mapping belongs', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'admin: [127.0.0.1, 9901]'));
    assert.deepEqual(placesOf([error]), ['8:8 admin']);
    assert.equal(error.message, 'expected a mapping, got a list');
  });

  void it('gives one error, not two, for a version of the wrong type', () => {
    const error = onlyErrorOf(yamlLines('version: "1"', ...BASE_LINES));
    assert.deepEqual(placesOf([error]), ['1:10 version']);
    assert.equal(error.message, 'expected one of: 1, got "1"');
  });

  void it('reports an unsupported version', () => {
    const error = onlyErrorOf(yamlLines('version: 2', ...BASE_LINES));
    assert.equal(error.message, 'must be one of: 1 (got 2)');
  });
});

void describe('route match conditions', () => {
  void it('points at an upper-case header name as a key', () => {
    const error = onlyErrorOf(
      yamlLines(...BASE_LINES, '    match:', '      headers:', '        X-Tenant: acme'),
    );
    assert.deepEqual(placesOf([error]), ['10:9 routes[0].match.headers["X-Tenant"]']);
    assert.equal(
      error.message,
      'header names must be lower-case HTTP tokens, like x-tenant (got "X-Tenant")',
    );
  });

  void it('requires upper-case methods and no repeats', () => {
    const errors = errorsOf(yamlLines(...BASE_LINES, '    match:', '      methods: [post, GET, GET]'));
    assert.deepEqual(placesOf(errors), [
      '9:17 routes[0].match.methods[0]',
      '9:28 routes[0].match.methods[2]',
    ]);
    assert.equal(errors[0]!.message, 'must be an HTTP method in upper case, like GET or POST (got "post")');
    assert.equal(errors[1]!.message, '"GET" is listed twice; each entry may appear only once');
  });

  void it('rejects a host with a port and a path without a leading slash', () => {
    const errors = errorsOf(
      yamlLines(...BASE_LINES, '    match: {host: "api.example.com:443", path: v1/models}'),
    );
    assert.deepEqual(placesOf(errors), ['8:19 routes[0].match.host', '8:48 routes[0].match.path']);
    assert.equal(
      errors[0]!.message,
      'must be a host name without port, like api.example.com (got "api.example.com:443")',
    );
    assert.equal(
      errors[1]!.message,
      'must be a path starting with \'/\', without query or fragment (got "v1/models")',
    );
  });

  void it('rejects an empty models list', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '    match: {models: []}'));
    assert.deepEqual(placesOf([error]), ['8:21 routes[0].match.models']);
    assert.equal(error.message, 'must list at least one entry (got an empty list)');
  });
});

void describe('missing keys', () => {
  void it('points at the parent mapping and names the missing key', () => {
    const error = onlyErrorOf(
      yamlLines('pools:', '  - name: gpu', 'routes:', '  - name: all', '    pool: gpu'),
    );
    assert.deepEqual(placesOf([error]), ['2:5 pools[0]']);
    assert.equal(error.message, 'missing required key "nodes"');
  });

  void it('names every missing key of one mapping in one error', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'listeners:', '  - address: 127.0.0.1'));
    assert.deepEqual(placesOf([error]), ['9:5 listeners[0]']);
    assert.equal(error.message, 'missing required keys "name" and "port"');
  });

  void it('asks for a pool or a split on a route that has neither', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '  - name: models', '    match: {path: /v1/models}'));
    assert.deepEqual(placesOf([error]), ['8:5 routes[1]']);
    assert.equal(
      error.message,
      'missing pool: name the pool that serves the route (or a split across pools)',
    );
  });

  void it('reports an empty file as such', () => {
    const error = onlyErrorOf('# nothing here yet\n');
    assert.deepEqual(placesOf([error]), ['1:1 ']);
    assert.equal(
      error.message,
      'the file is empty: a Sluice config is a mapping that needs at least pools and routes',
    );
  });

  void it('rejects a pool without nodes', () => {
    const error = onlyErrorOf(
      yamlLines('pools:', '  - name: gpu', '    nodes: []', 'routes: [{name: r, pool: gpu}]'),
    );
    assert.deepEqual(placesOf([error]), ['3:12 pools[0].nodes']);
    assert.equal(error.message, 'must list at least one entry (got an empty list)');
  });
});

void describe('many errors', () => {
  void it('reports every problem at once, in file order', () => {
    const errors = errorsOf(
      yamlLines(
        'listeners:',
        '  - name: public',
        '    port: 80a',
        '    extra: 1',
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: ftp://x',
        '    balance: {kind: rr}',
        'routes:',
        '  - name: all',
        '    pool: cpu',
      ),
    );
    assert.deepEqual(placesOf(errors), [
      '3:11 listeners[0].port',
      '4:5 listeners[0].extra',
      '8:14 pools[0].nodes[0].url',
      '9:21 pools[0].balance.kind',
      '12:11 routes[0].pool',
    ]);
  });
});

void describe('errors about secrets', () => {
  const texts = (lines: string[], base: readonly string[] = BASE_LINES): string =>
    errorsOf(yamlLines(...base, ...lines))
      .map((e) => formatConfigError(e))
      .join('\n');

  void it('never quote a credential or the password of a URL', () => {
    const out = texts([
      'admin:',
      '  token: { sha256: my-plain-admin-token }',
      'rate_limits:',
      '  store: redis',
      '  redis: { url: "rediss:/user:s3cretpw@cache:6379" }',
      'tracing: { endpoint: "otlp://otel:hunter2@collector:4318" }',
    ]);
    assert.match(out, /admin\.token\.sha256/);
    assert.match(out, /rate_limits\.redis\.url/);
    for (const secret of ['my-plain-admin-token', 's3cretpw', 'hunter2'])
      assert.ok(!out.includes(secret), `${secret} quoted in:\n${out}`);
  });

  void it('mask the password of a node URL', () => {
    const out = texts(
      [],
      [
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: "http://admin:n0depass@10.0.0.7:8000"}]',
        'routes: [{name: all, pool: gpu}]',
      ],
    );
    assert.match(out, /base URL/);
    assert.ok(!out.includes('n0depass'), out);
    assert.match(out, /admin:\*\*\*\*@/);
  });
});
