/**
 * `npm run bench:idle`: what idle client connections cost Sluice in memory, and what its footprint
 * holds before the first one. Starts a Sluice child (one pool, one route, one simulated node) on
 * each downstream engine, opens BENCH_IDLE_CONNECTIONS (default 10,000) keep-alive connections that
 * each send one `GET /v1/models` and then stay idle, and prints Sluice's RSS (VmRSS from /proc)
 * before the first connection, with every connection open, and once they are closed again.
 *
 * The baseline is taken apart by starting, in the same way, a bare Node process and a Node process
 * that has only loaded the libraries Sluice loads at startup (uWebSockets.js, hdr-histogram-js's
 * WebAssembly with one histogram; undici loads only for `https:` nodes or `upstream_client: undici`):
 * what is left is Sluice's own code and state.
 *
 * Loopback only, every phase bounded in time. Needs an open-file limit above twice the connection
 * count (`ulimit -n`); the npm script raises it where the hard limit allows.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { startOneFastNode, type FleetHandle } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { rssMiB } from '../env/proc-stats.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';

const count = Number(process.env['BENCH_IDLE_CONNECTIONS'] ?? 10_000);
const engines = (process.env['BENCH_ENGINES'] ?? 'uws,net').split(',');
/**
 * The cores `server.workers: auto` counts in the Sluice child (`--cores`): 1 by default, the
 * footprint of one thread; the machine's core count shows what the shipped default costs there.
 */
const cores = Number(process.env['BENCH_CORES'] ?? 1);
/** How long opening every connection and reading every answer may take, ms. */
const OPEN_DEADLINE_MS = 60_000;
/** Connections being opened at once. */
const OPEN_BATCH = 500;
const REQUEST = 'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n';

/** One idle client: connects, sends one request, reads its answer, then stays open. */
function openIdle(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    s.setNoDelay(true);
    let seen = '';
    const onData = (d: Buffer): void => {
      seen += d.toString('latin1');
      // The answer is small; its head and the end of its JSON body arrive together or soon after.
      if (seen.startsWith('HTTP/1.1 200') && seen.trimEnd().endsWith('}')) {
        s.off('data', onData);
        s.resume();
        resolve(s);
      } else if (seen.length > 0 && !seen.startsWith('HTTP/1.1 200'.slice(0, seen.length))) {
        reject(new Error(`unexpected answer: ${seen.slice(0, 80)}`));
      }
    };
    s.on('data', onData);
    s.on('error', reject);
    s.on('connect', () => s.write(REQUEST));
  });
}

async function openAll(port: number, n: number): Promise<Socket[]> {
  const sockets: Socket[] = [];
  const deadline = Date.now() + OPEN_DEADLINE_MS;
  while (sockets.length < n) {
    if (Date.now() > deadline) throw new Error(`only ${sockets.length} of ${n} connections opened in time`);
    const batch = Math.min(OPEN_BATCH, n - sockets.length);
    sockets.push(...(await Promise.all(Array.from({ length: batch }, () => openIdle(port)))));
  }
  return sockets;
}

async function connectionsHeld(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(/^sluice_listener_connections\{listener="public"\} (\d+)/m.exec(text)?.[1] ?? -1);
}

/** RSS of a Node process running `code` (an ES module), read once it printed `ready`. */
async function processRss(code: string): Promise<number> {
  const cwd = fileURLToPath(new URL('../../../', import.meta.url));
  const child: ChildProcess = spawn(process.execPath, ['--input-type=module', '-e', code], {
    cwd,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('baseline process did not start')), 15_000);
      child.stdout?.on('data', (d: Buffer) => {
        if (d.toString().includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on('exit', (code) => reject(new Error(`baseline process exited with ${code}`)));
    });
    // Let the process settle (lazy pages, the first GC) as Sluice does before it is measured.
    await new Promise((r) => setTimeout(r, 1000));
    return await rssMiB(child.pid);
  } finally {
    child.kill('SIGKILL');
  }
}

const HOLD = 'console.log("ready"); setInterval(() => {}, 1000);';
const LIBRARIES =
  "import * as uws from 'uWebSockets.js'; import * as hdr from 'hdr-histogram-js';" +
  'await hdr.initWebAssembly(); hdr.build({ useWebAssembly: true }); void uws.App;' +
  HOLD;

async function runEngine(engine: string, node: string): Promise<void> {
  const [port, adminPort] = [await freePort(), await freePort()];
  let sluice: SluiceChild | null = null;
  let sockets: Socket[] = [];
  try {
    sluice = await startSluiceChild(
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\n    pipelining: ${engine === 'net' ? 16 : 0}\n` +
        // A cap, as an edge listener runs with; it also makes uWS count the connections it holds.
        `    max_connections: ${count * 2}\n` +
        `admin:\n  address: 127.0.0.1\n  port: ${adminPort}\n` +
        `pools:\n  - name: gpu\n    nodes:\n      - url: ${node}\n` +
        'routes:\n  - name: all\n    match: {}\n    pool: gpu\n',
      'public',
      15_000,
      cores,
    );
    const admin = `http://127.0.0.1:${adminPort}`;
    const view = (await (await fetch(`${admin}/admin/config`)).json()) as { threads?: number };
    const threads = view.threads ?? 1;
    await new Promise((r) => setTimeout(r, 1000));
    const before = await rssMiB(sluice.pid);
    const started = performance.now();
    sockets = await openAll(port, count);
    const openMs = performance.now() - started;
    await new Promise((r) => setTimeout(r, 1000));
    const held = await connectionsHeld(admin);
    const open = await rssMiB(sluice.pid);
    for (const s of sockets) s.destroy();
    sockets = [];
    const deadline = Date.now() + 15_000;
    while ((await connectionsHeld(admin)) > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 200));
    const closed = await rssMiB(sluice.pid);
    const perConn = ((open - before) * 1024) / count;
    process.stdout.write(
      `| ${engine} | ${threads} | ${count} | ${held} | ${before.toFixed(1)} | ${open.toFixed(1)} | ${perConn.toFixed(1)} | ` +
        `${closed.toFixed(1)} | ${(openMs / 1000).toFixed(1)} |\n`,
    );
  } finally {
    for (const s of sockets) s.destroy();
    await sluice?.stop();
  }
}

async function main(): Promise<void> {
  let fleet: FleetHandle | null = null;
  try {
    const bare = await processRss(HOLD);
    const libs = await processRss(LIBRARIES);
    process.stdout.write(
      `baseline: bare Node ${bare.toFixed(1)} MiB; Node with uWebSockets.js and hdr-histogram-js (WebAssembly) loaded ${libs.toFixed(1)} MiB\n\n`,
    );
    fleet = await startOneFastNode();
    process.stdout.write(
      '| engine | threads | idle connections | held by Sluice | RSS before, MiB | RSS with all open, MiB | KiB per connection | RSS after close, MiB | seconds to open |\n' +
        '| --- | --: | --: | --: | --: | --: | --: | --: | --: |\n',
    );
    for (const engine of engines) await runEngine(engine, fleet.urls[0]!);
  } finally {
    await fleet?.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
