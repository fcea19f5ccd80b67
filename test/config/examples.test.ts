/**
 * The shipped configs: the embedded default that `npm start` runs and every file under
 * config/examples/ must load, and the defaults the loader fills in must be the documented ones.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { formatConfigError, loadConfigFile } from '../../config/loader.js';
import { defaultConfigPath, findSluiceRoot } from '../../config/sluice-root.js';
import type { SluiceConfig } from '../../config/types.js';

/** `server.overload` as every config gets it by default. */
const OVERLOAD_DEFAULTS = {
  event_loop_delay_ms: 1000,
  heap_used_percent: 90,
  sample_interval_ms: 500,
  recover_ratio: 0.8,
  min_shed_ms: 2000,
  retry_after_ms: 1000,
};

const examplesDir = join(findSluiceRoot(), 'config', 'examples');

async function load(file: string): Promise<SluiceConfig> {
  const result = await loadConfigFile(file);
  if (!result.ok) assert.fail(result.errors.map(formatConfigError).join('\n'));
  return result.config;
}

const DEFAULT_TIMEOUTS = { connect_ms: 2000, ttfb_ms: 60000, idle_ms: 30000, total_ms: 600000 };

void describe('config/default.yaml', () => {
  void it('loads and describes four simulated nodes behind one pool', async () => {
    const config = await load(defaultConfigPath());
    assert.deepEqual(config.simulator, {
      nodes: 4,
      address: '127.0.0.1',
      port: 9100,
      profile: 'llama-8b-h100-bf16',
    });
    assert.deepEqual(config.listeners, [
      {
        name: 'public',
        address: '0.0.0.0',
        port: 8080,
        max_body_bytes: 10 * 1024 * 1024,
        max_header_bytes: 16 * 1024,
        max_header_count: 100,
        max_url_bytes: 8192,
        pipelining: 16,
        trust_forwarded: false,
        header_timeout_ms: 10000,
        body_timeout_ms: 60000,
        write_timeout_ms: 30000,
        write_buffer_bytes: 65536,
        max_connections: 0,
      },
    ]);
    assert.deepEqual(config.admin, { address: '127.0.0.1', port: 9901 });
    assert.deepEqual(config.server, {
      drain_timeout_ms: 30000,
      reload_debounce_ms: 100,
      workers: 'auto',
      overload: OVERLOAD_DEFAULTS,
    });
    assert.equal(config.pools.length, 1);
    const pool = config.pools[0]!;
    assert.equal(pool.name, 'gpu');
    assert.deepEqual(
      pool.nodes,
      [9100, 9101, 9102, 9103].map((port) => ({ url: `http://127.0.0.1:${port}`, weight: 1 })),
    );
    assert.deepEqual(pool.balance, { kind: 'round-robin' });
    assert.equal(pool.connections_per_node, undefined, 'no connection cap unless configured');
    assert.deepEqual(pool.timeouts, DEFAULT_TIMEOUTS);
  });

  void it('routes chat, completions, embeddings and models to the gpu pool', async () => {
    const config = await load(defaultConfigPath());
    assert.deepEqual(
      config.routes.map((r) => [r.name, r.match.methods, r.match.path, r.pool]),
      [
        ['chat', ['POST'], '/v1/chat/completions', 'gpu'],
        ['completions', ['POST'], '/v1/completions', 'gpu'],
        ['embeddings', ['POST'], '/v1/embeddings', 'gpu'],
        ['models', ['GET'], '/v1/models', 'gpu'],
      ],
    );
  });

  void it('reports the sha256 of the file text as the digest', async () => {
    const file = defaultConfigPath();
    const result = await loadConfigFile(file);
    assert.ok(result.ok);
    const text = await readFile(file, 'utf8');
    assert.equal(result.digest, createHash('sha256').update(text).digest('hex'));
    assert.match(result.digest, /^[0-9a-f]{64}$/);
  });
});

void describe('config/examples', () => {
  void it('every example file loads without errors', async () => {
    const files = (await readdir(examplesDir)).filter((f) => f.endsWith('.yaml'));
    assert.ok(files.includes('minimal.yaml') && files.includes('full.yaml'));
    for (const file of files) await load(join(examplesDir, file));
  });

  void it('minimal.yaml gets the default listener, admin, server, balance, timeouts, weights and a catch-all match', async () => {
    const config = await load(join(examplesDir, 'minimal.yaml'));
    assert.deepEqual(config, {
      listeners: [
        {
          name: 'public',
          address: '0.0.0.0',
          port: 8080,
          max_body_bytes: 10485760,
          max_header_bytes: 16384,
          max_header_count: 100,
          max_url_bytes: 8192,
          pipelining: 0,
          trust_forwarded: false,
          header_timeout_ms: 10000,
          body_timeout_ms: 60000,
          write_timeout_ms: 30000,
          write_buffer_bytes: 65536,
          max_connections: 0,
        },
      ],
      admin: { address: '127.0.0.1', port: 9901 },
      server: {
        drain_timeout_ms: 30000,
        reload_debounce_ms: 100,
        workers: 'auto',
        overload: OVERLOAD_DEFAULTS,
      },
      metrics: { window_slices: 6, window_slice_ms: 10000 },
      pools: [
        {
          name: 'gpu',
          nodes: [
            { url: 'http://10.0.0.7:8000', weight: 1 },
            { url: 'http://10.0.0.8:8000', weight: 1 },
          ],
          balance: { kind: 'round-robin' },
          upstream_client: 'sluice',
          max_in_flight_per_node: 0,
          timeouts: DEFAULT_TIMEOUTS,
          health: {
            outlier: {
              consecutive_failures: 5,
              base_ejection_ms: 10000,
              max_ejection_ms: 300000,
              max_ejection_percent: 50,
            },
            slow_start_ms: 30000,
          },
          retry_budget: { percent: 20, min_per_second: 5 },
        },
      ],
      routes: [
        {
          name: 'all',
          pool: 'gpu',
          match: {},
          fallback: [],
          retries: {
            max: 1,
            base_backoff_ms: 25,
            max_backoff_ms: 250,
            on: ['connect-failure', 'reset', '5xx'],
            max_retry_after_ms: 2000,
          },
          route_header: false,
          allow_anonymous: false,
        },
      ],
      rate_limits: { store: 'memory', default_max_tokens: 1024, max_retry_after_ms: 60000 },
      plugins: [],
      plugin_store: { store: 'memory', max_entries: 100000 },
    });
  });

  void it('full.yaml keeps route timeout overrides partial and every match condition', async () => {
    const config = await load(join(examplesDir, 'full.yaml'));
    assert.deepEqual(
      config.pools.map((p) => p.name),
      ['big', 'small'],
    );
    assert.deepEqual(config.pools[1]!.timeouts, DEFAULT_TIMEOUTS);
    assert.deepEqual(
      config.pools[1]!.nodes.map((n) => n.weight),
      [2, 1, 0],
    );
    const premium = config.routes.find((r) => r.name === 'premium-chat');
    assert.deepEqual(premium?.timeouts, { ttfb_ms: 20000, total_ms: 300000 });
    assert.deepEqual(premium?.match.headers, { 'x-tier': 'premium' });
    assert.equal(premium?.match.host, 'api.internal.example.com');
    const big = config.routes.find((r) => r.name === 'big-model');
    assert.deepEqual(big?.match.models, ['meta-llama/Llama-3.1-70B-Instruct']);
    assert.equal(big?.match.path_prefix, '/v1/');
    assert.equal(big?.timeouts, undefined);
    assert.equal(config.simulator, undefined);
    assert.equal('version' in config, false);
  });
});
