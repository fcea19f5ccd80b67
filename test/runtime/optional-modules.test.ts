/**
 * Packages only some configs need (`redis`, `better-sqlite3`, `pino`) are loaded when a config
 * uses them, not by every Sluice process: a fresh Node process starts Sluice on a config and
 * reports which of them are in the module cache once it serves.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD } from '../helpers/sluice.js';

const SLUICE_MODULE = fileURLToPath(new URL('../../proxy/runtime/sluice.js', import.meta.url));

/** Starts Sluice on `configPath` in a new process, sends one request, prints what is loaded. */
const PROBE = `
import { createRequire } from 'node:module';
import { startSluice } from ${JSON.stringify(SLUICE_MODULE)};
const s = await startSluice({ configPath: process.argv[1], watch: false });
const port = s.listeners[0].port;
const r = await fetch('http://127.0.0.1:' + port + '/v1/models');
await r.arrayBuffer();
const loaded = Object.keys(createRequire(import.meta.url).cache);
const has = (dir) => loaded.some((k) => k.includes('/node_modules/' + dir + '/'));
console.log(JSON.stringify({ status: r.status, redis: has('@redis/client'), sqlite: has('better-sqlite3'), pino: has('pino') }));
await s.close();
process.exit(0);
`;

interface Loaded {
  status: number;
  redis: boolean;
  sqlite: boolean;
  pino: boolean;
}

async function probe(configPath: string): Promise<Loaded> {
  const out = await new Promise<string>((resolve, reject) => {
    execFile(
      process.execPath,
      ['--input-type=module', '-e', PROBE, configPath],
      { timeout: 20_000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
    );
  });
  const line = out.trim().split('\n').pop() ?? '';
  return JSON.parse(line) as Loaded;
}

describe('optional packages', { timeout: 60_000 }, () => {
  let fleet: SimFleet;
  let dir: string;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    dir = await mkdtemp(join(tmpdir(), 'sluice-optional-'));
  });

  after(async () => {
    await fleet?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  const pools = (): string =>
    `pools:\n  - name: gpu\n    nodes:\n      - url: ${fleet.urls[0]}\nroutes:\n  - name: all\n    match: {}\n    pool: gpu\n`;

  it('a config without Redis, batch API or access log loads none of redis, better-sqlite3 and pino', async () => {
    const file = join(dir, 'minimal.yaml');
    await writeFile(file, LOOPBACK_HEAD + pools());
    assert.deepEqual(await probe(file), { status: 200, redis: false, sqlite: false, pino: false });
  });

  it('a config whose rate limits live in Redis loads redis at startup, before any tenant needs it', async () => {
    const file = join(dir, 'redis-limits.yaml');
    // No tenants yet (a reload may add them): no connection is made, but the package is loaded.
    await writeFile(
      file,
      `${LOOPBACK_HEAD}${pools()}rate_limits:\n  store: redis\n  redis: { url: "redis://127.0.0.1:1" }\n`,
    );
    assert.deepEqual(await probe(file), { status: 200, redis: true, sqlite: false, pino: false });
  });

  it('a config with an access log loads pino, and only pino', async () => {
    const file = join(dir, 'access-log.yaml');
    await writeFile(
      file,
      `${LOOPBACK_HEAD}${pools()}access_log:\n  destination: ${join(dir, 'access.log')}\n`,
    );
    assert.deepEqual(await probe(file), { status: 200, redis: false, sqlite: false, pino: true });
  });
});
