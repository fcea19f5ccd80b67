/**
 * Test helpers: start a real Sluice in-process on loopback port 0 from a YAML text, with its config
 * written to a temp directory so reload tests can edit it; build that YAML and the usual chat
 * request; find Sluice's own node objects. Test support only.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSluice, type Sluice } from '../../proxy/runtime/sluice.js';
import { createLogger, type Logger } from '../../proxy/runtime/logger.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

export interface TestSluice {
  sluice: Sluice;
  /** `http://127.0.0.1:PORT` of the first listener. */
  url: string;
  /** `http://127.0.0.1:PORT` of the admin API. */
  adminUrl: string;
  configPath: string;
  /** Log lines written so far. */
  logs: string[];
  close(): Promise<void>;
}

/** A logger that keeps lines in memory (and prints them when SLUICE_TEST_LOG is set). */
export function memoryLogger(lines: string[]): Logger {
  const base = createLogger('debug', (l) => {
    lines.push(l);
    if (process.env['SLUICE_TEST_LOG']) process.stderr.write(l);
  });
  return base;
}

/**
 * Starts Sluice with `yaml` as its config file. `before` runs once the file is written, with its
 * directory (to put files beside it, e.g. certificates), before Sluice starts.
 */
export async function startTestSluice(
  yaml: string,
  opts: { watch?: boolean; before?: (dir: string) => Promise<void>; cores?: number } = {},
): Promise<TestSluice> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-test-'));
  const configPath = join(dir, 'sluice.yaml');
  await writeFile(configPath, yaml);
  const logs: string[] = [];
  let sluice: Sluice;
  try {
    await opts.before?.(dir);
    // `server.workers: auto` counts one core unless a test asks for more: a test of one thread's
    // behaviour must not depend on the machine it runs on (test/runtime/ tests the threads).
    sluice = await startSluice({
      configPath,
      watch: opts.watch ?? false,
      logger: memoryLogger(logs),
      cores: opts.cores ?? 1,
    });
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  const port = sluice.listeners[0]!.port;
  return {
    sluice,
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${sluice.adminPort}`,
    configPath,
    logs,
    async close() {
      await sluice.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The error a Sluice started with `yaml` refuses to start with. A Sluice that starts after all is
 * closed first (a test must not leave it holding the process open), then the call rejects.
 */
export async function startRefused(yaml: string): Promise<Error> {
  let started: TestSluice;
  try {
    started = await startTestSluice(yaml);
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
  await started.close();
  throw new Error('Sluice started with a config it should refuse');
}

/** The listener and admin sections of test configs: loopback, free ports. */
export const LOOPBACK_HEAD = `listeners:
  - name: public
    address: 127.0.0.1
    port: 0
admin:
  address: 127.0.0.1
  port: 0
`;

/** YAML lines added inside the pool and the route of `basicConfig`, indented by four spaces. */
export interface BasicConfigParts {
  /** Pool keys after `nodes` (`    admission: { max_queue: 1 }`). Default none. */
  pool?: string;
  /** Route keys after `pool: gpu` (`    route_header: true`). Default none. */
  route?: string;
}

/**
 * A config with one listener and one admin listener on free ports, one pool `gpu` of `nodes` and
 * one route `all` matching everything. `extra` is appended at the top level (tenants, rate_limits,
 * batch_api); `parts` adds keys to the pool and the route.
 */
export function basicConfig(nodes: readonly string[], extra = '', parts: BasicConfigParts = {}): string {
  const pool = parts.pool === undefined ? '' : `${parts.pool}\n`;
  const route = parts.route === undefined ? '' : `${parts.route}\n`;
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
${pool}routes:
  - name: all
    match: {}
    pool: gpu
${route}${extra}`;
}

/**
 * A `fetch` init for a small chat completion: POST, JSON, model `m`, one user message, 4 output
 * tokens. `body` fields override or extend the body (`{ stream: true }`); `headers` are added.
 */
export function chatRequest(
  body: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...body }),
  };
}

/** Sluice's own node for `url` (compared by origin), or undefined once Sluice no longer holds it. */
export function findNode(t: TestSluice, url: string): UpstreamNode | undefined {
  const origin = new URL(url).origin;
  for (const n of t.sluice.registry.all()) if (n.origin === origin) return n;
  return undefined;
}

/** Polls `check` until it returns true or `timeoutMs` passes; rejects on timeout. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
