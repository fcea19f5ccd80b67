/**
 * Configuration files of the proxies the benchmark compares: nginx (one worker), HAProxy (one
 * thread) and Sluice (the minimal and the full-featured configuration, and overlays on the minimal
 * one). Pure text: ports and node URLs come in, file contents go out; the runner writes them.
 */
import { parse, stringify } from 'yaml';
import { BENCH_API_KEY } from './chat-fixtures.js';

/** Environment variable through which Sluice's full configuration gets the tenant's API key. */
export const API_KEY_ENV = 'BENCH_API_KEY';

/** One nginx listener: a port, its node, and whether responses are streamed unbuffered. */
export interface NginxListener {
  port: number;
  upstream: string;
  /** `proxy_buffering off`, as an SSE deployment configures it. */
  unbuffered: boolean;
}

/** Host and port of an `http://host:port` origin. */
function hostPort(origin: string): string {
  return new URL(origin).host;
}

/**
 * nginx with one worker, keep-alive to the nodes (up to 256 idle connections each) and to clients
 * (no recycling after 1000 requests), no access log; temp paths under the `-p` prefix.
 */
export function nginxConf(listeners: readonly NginxListener[]): string {
  const upstreams = new Map<string, string>();
  for (const l of listeners) {
    if (!upstreams.has(l.upstream)) upstreams.set(l.upstream, `node${upstreams.size}`);
  }
  const lines = [
    'worker_processes 1;',
    'daemon off;',
    'master_process on;',
    'error_log stderr warn;',
    'events { worker_connections 8192; multi_accept on; }',
    'http {',
    '  access_log off;',
    '  client_body_temp_path tmp/body;',
    '  proxy_temp_path tmp/proxy;',
    '  fastcgi_temp_path tmp/fastcgi;',
    '  uwsgi_temp_path tmp/uwsgi;',
    '  scgi_temp_path tmp/scgi;',
    '  keepalive_timeout 65s;',
    '  keepalive_requests 1000000;',
  ];
  for (const [origin, name] of upstreams) {
    lines.push(
      `  upstream ${name} {`,
      `    server ${hostPort(origin)};`,
      '    keepalive 256;',
      '    keepalive_requests 1000000;',
      '    keepalive_timeout 60s;',
      '  }',
    );
  }
  for (const l of listeners) {
    lines.push(
      '  server {',
      `    listen 127.0.0.1:${l.port};`,
      '    location / {',
      `      proxy_pass http://${upstreams.get(l.upstream)!};`,
      '      proxy_http_version 1.1;',
      '      proxy_set_header Connection "";',
      ...(l.unbuffered ? ['      proxy_buffering off;'] : []),
      '    }',
      '  }',
    );
  }
  lines.push('}', '');
  return lines.join('\n');
}

/** HAProxy with one thread, keep-alive both sides, server connections reused across clients. */
export function haproxyCfg(port: number, upstream: string): string {
  return [
    'global',
    '  nbthread 1',
    '  maxconn 8000',
    'defaults',
    '  mode http',
    '  option http-keep-alive',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  timeout http-keep-alive 60s',
    'frontend bench',
    `  bind 127.0.0.1:${port}`,
    '  default_backend node',
    'backend node',
    '  http-reuse always',
    `  server n1 ${hostPort(upstream)}`,
    '',
  ].join('\n');
}

/** Where a Sluice process listens and which node it forwards to. */
export interface SluicePorts {
  port: number;
  adminPort: number;
  upstream: string;
}

type Doc = Record<string, unknown>;

function frame(p: SluicePorts): Doc {
  return {
    listeners: [{ name: 'public', address: '127.0.0.1', port: p.port }],
    admin: { address: '127.0.0.1', port: p.adminPort },
  };
}

/** One pool with one node, one route for `/v1/`, every other setting at its shipped default. */
export function sluiceMinConfig(p: SluicePorts): Doc {
  return {
    version: 1,
    ...frame(p),
    pools: [{ name: 'up', nodes: [{ url: p.upstream }] }],
    routes: [{ name: 'all', match: { path_prefix: '/v1/' }, pool: 'up' }],
  };
}

/**
 * The per-request features on: tenant API key with request, token and concurrency limits
 * (in-process store), admission, consistent hashing with bounded load keyed by the first 600
 * characters of the prompt, active health checks, outlier ejection, a retry budget and retries,
 * and the `x-sluice-route` header. Limits are high enough never to reject.
 */
export function sluiceFullConfig(p: SluicePorts): Doc {
  return {
    version: 1,
    ...frame(p),
    pools: [
      {
        name: 'up',
        balance: { kind: 'consistent-hash', epsilon: 0.25, affinity: { source: 'prefix', chars: 600 } },
        nodes: [{ url: p.upstream }],
        health: {
          active: { path: '/health', interval_ms: 5000, unhealthy_threshold: 3, healthy_threshold: 2 },
          outlier: { consecutive_failures: 5, base_ejection_ms: 10_000, max_ejection_percent: 50 },
        },
        retry_budget: { percent: 20, min_per_second: 5 },
        admission: { max_in_flight_per_node: 512, max_queue: 1024, max_wait_ms: 10_000 },
      },
    ],
    routes: [
      {
        name: 'chat',
        match: { path_prefix: '/v1/', methods: ['POST'] },
        pool: 'up',
        retries: { max: 1, on: ['connect-failure', 'reset', '5xx'] },
        route_header: true,
      },
    ],
    tenants: [
      {
        name: 'bench',
        keys: [{ env: API_KEY_ENV }],
        limits: {
          requests_per_minute: 100_000_000,
          tokens_per_minute: 100_000_000_000,
          max_concurrent: 100_000,
        },
      },
    ],
    rate_limits: { store: 'memory', default_max_tokens: 1024 },
  };
}

/** An overlay file that is not a YAML mapping. */
export class OverlayError extends Error {
  override readonly name = 'OverlayError';
}

/**
 * The minimal configuration with the overlay's top-level keys laid over it (a key in the overlay
 * replaces the minimal one's whole value; `plugins: []` adds a key). The string `${UPSTREAM}`
 * anywhere in the overlay becomes the node's URL. `listeners` and `admin` always stay the
 * benchmark's own, so every variant is measured on its own port.
 */
export function sluiceOverlayConfig(p: SluicePorts, overlayText: string, file: string): Doc {
  let overlay: unknown;
  try {
    overlay = parse(overlayText.split('${UPSTREAM}').join(p.upstream));
  } catch (err) {
    throw new OverlayError(`${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (overlay === null || overlay === undefined) overlay = {};
  if (typeof overlay !== 'object' || Array.isArray(overlay)) {
    throw new OverlayError(`${file}: expected a YAML mapping of top-level config keys`);
  }
  return { ...sluiceMinConfig(p), ...(overlay as Doc), ...frame(p) };
}

/** YAML text of a configuration document, with a header naming what produced it. */
export function sluiceYaml(doc: Doc, what: string): string {
  return `# ${what}, written by the proxy benchmark (loadtest/bench/).\n${stringify(doc)}`;
}

/** Environment for Sluice processes: the tenant key of the full configuration. */
export function sluiceEnv(): Record<string, string> {
  return { [API_KEY_ENV]: BENCH_API_KEY };
}
