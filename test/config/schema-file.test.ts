/**
 * config/schema.json is also read by editors: every property documented, every object closed
 * (additionalProperties: false) except free-form maps, and the defaults the ones types.ts documents.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { schemaFilePath } from '../../config/sluice-root.js';

type Json = Record<string, unknown>;

const schema = JSON.parse(readFileSync(schemaFilePath(), 'utf8')) as Json;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Every subschema with the JSON path that leads to it. */
function* subschemas(node: Json, path: string): Generator<[string, Json]> {
  yield [path, node];
  const properties = node['properties'];
  if (isRecord(properties)) {
    for (const [key, child] of Object.entries(properties)) {
      if (isRecord(child)) yield* subschemas(child, `${path}.${key}`);
    }
  }
  for (const keyword of ['items', 'additionalProperties', 'propertyNames']) {
    const child = node[keyword];
    if (isRecord(child)) yield* subschemas(child, `${path}[${keyword}]`);
  }
}

/** The schema of the property at a dotted path, through arrays' `items`. */
function at(path: string): Json {
  let node: Json = schema;
  for (const key of path.split('.')) {
    const properties = node['properties'];
    assert.ok(isRecord(properties), `no properties above ${key}`);
    let child = properties[key];
    if (
      isRecord(child) &&
      child['type'] === 'array' &&
      isRecord(child['items']) &&
      key !== path.split('.').at(-1)
    ) {
      child = child['items'];
    }
    assert.ok(isRecord(child), `no schema at ${path}`);
    node = child;
  }
  return node;
}

void describe('config/schema.json', () => {
  void it('describes every property', () => {
    for (const [path, node] of subschemas(schema, '$')) {
      assert.equal(typeof node['description'], 'string', `${path} has no description`);
    }
  });

  void it('closes every object except the headers and per-model limit maps and plugin options', () => {
    for (const [path, node] of subschemas(schema, '$')) {
      if (node['type'] !== 'object') continue;
      // A plugin's options are checked against the plugin's own schema when it is loaded.
      if (path.endsWith('.plugins[items].options')) continue;
      if (path.endsWith('.match.headers') || path.endsWith('.request_headers') || path.endsWith('.models')) {
        assert.ok(isRecord(node['additionalProperties']), 'headers values must be typed');
        continue;
      }
      assert.equal(node['additionalProperties'], false, `${path} accepts unknown keys`);
    }
  });

  void it('states the documented defaults', () => {
    const defaults: [string, unknown][] = [
      ['listeners', [{ name: 'public', address: '0.0.0.0', port: 8080 }]],
      ['listeners.address', '0.0.0.0'],
      ['listeners.max_body_bytes', 10 * 1024 * 1024],
      ['listeners.max_header_bytes', 16 * 1024],
      ['listeners.max_header_count', 100],
      ['listeners.max_url_bytes', 8192],
      ['listeners.pipelining', 0],
      ['listeners.header_timeout_ms', 10000],
      ['listeners.body_timeout_ms', 60000],
      ['listeners.write_timeout_ms', 30000],
      ['listeners.write_buffer_bytes', 65536],
      ['listeners.max_connections', 0],
      ['admin', {}],
      ['admin.address', '127.0.0.1'],
      ['admin.port', 9901],
      ['server', {}],
      ['server.drain_timeout_ms', 30000],
      ['server.reload_debounce_ms', 100],
      ['server.overload', {}],
      ['server.overload.event_loop_delay_ms', 1000],
      ['server.overload.heap_used_percent', 90],
      ['server.overload.min_shed_ms', 2000],
      ['pools.balance', { kind: 'round-robin' }],
      ['pools.timeouts.connect_ms', 2000],
      ['pools.timeouts.ttfb_ms', 60000],
      ['pools.timeouts.idle_ms', 30000],
      ['pools.timeouts.total_ms', 600000],
      ['pools.nodes.weight', 1],
      ['routes.match', {}],
      ['simulator.address', '127.0.0.1'],
      ['simulator.profile', 'llama-8b-h100-bf16'],
    ];
    for (const [path, value] of defaults) assert.deepEqual(at(path)['default'], value, path);
  });

  void it('gives route timeout overrides no defaults, so they stay partial', () => {
    for (const [path, node] of subschemas(at('routes.timeouts'), 'routes.timeouts')) {
      assert.equal(node['default'], undefined, `${path} has a default`);
    }
  });
});
