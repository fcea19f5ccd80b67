/**
 * `npm run bench:engines`: CPU time per request of one Sluice process on each downstream engine,
 * side by side in one run. Sluice runs as a child with two listeners, one on uWS (`pipelining: 0`)
 * and one on its own HTTP/1.1 engine (`pipelining: 16`), pinned to CPU 1; wrk and one simulated
 * node share CPU 0. Rounds alternate the engines under the same wrk load (1 KiB POST to
 * /debug/echo); each phase reads Sluice's CPU time from /proc before and after. A last phase
 * pipelines 10 requests per connection on the own engine. Needs Linux, `wrk` and `taskset`.
 * Environment: BENCH_DURATION (s per phase, default 10), BENCH_ROUNDS (default 3),
 * BENCH_CONNECTIONS (default 32).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { cpuSeconds } from '../env/child-process.js';
import { startOneFastNode, type FleetHandle } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';

const run = promisify(execFile);
const duration = Number(process.env['BENCH_DURATION'] ?? 10);
const rounds = Number(process.env['BENCH_ROUNDS'] ?? 3);
const connections = Number(process.env['BENCH_CONNECTIONS'] ?? 32);
const body = JSON.stringify({ model: 'bench', input: 'x'.repeat(1000) });

/** A wrk script: a 1 KiB JSON POST, `depth` requests pipelined per write. */
function wrkScript(depth: number): string {
  return `wrk.method = "POST"
wrk.body = ${JSON.stringify(body)}
wrk.headers["Content-Type"] = "application/json"
local batch = nil
init = function(args)
  local r = wrk.format()
  batch = ""
  for i = 1, ${depth} do batch = batch .. r end
end
request = function() return batch end
`;
}

interface Phase {
  engine: string;
  requests: number;
  rps: number;
  cpuUsPerReq: number;
  errors: number;
}

/** Pins every thread of `pid` to `cpu`. */
async function pin(pid: number | undefined, cpu: number): Promise<void> {
  if (pid === undefined) throw new Error('no pid to pin');
  await run('taskset', ['-a', '-p', '-c', String(cpu), String(pid)]);
}

async function phase(engine: string, url: string, script: string, pid: number | undefined): Promise<Phase> {
  const before = await cpuSeconds(pid);
  const { stdout } = await run(
    'taskset',
    ['-c', '0', 'wrk', '-t1', `-c${connections}`, `-d${duration}s`, '-s', script, url],
    { timeout: (duration + 30) * 1000 },
  );
  const after = await cpuSeconds(pid);
  const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? 0);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? 0);
  const m = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);
  const errors = (m === null ? 0 : m.slice(1).reduce((a, x) => a + Number(x), 0)) + non2xx;
  if (before === null || after === null || requests === 0) throw new Error(`no measurement: ${stdout}`);
  return { engine, requests, rps, cpuUsPerReq: ((after - before) * 1e6) / requests, errors };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

async function main(): Promise<void> {
  let fleet: FleetHandle | null = null;
  let sluice: SluiceChild | null = null;
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-engines-'));
  try {
    const single = join(dir, 'single.lua');
    const piped = join(dir, 'piped.lua');
    await writeFile(single, wrkScript(1));
    await writeFile(piped, wrkScript(10));
    fleet = await startOneFastNode();
    const node = fleet.urls[0]!;
    const [uwsPort, netPort, adminPort] = [await freePort(), await freePort(), await freePort()];
    sluice = await startSluiceChild(
      `listeners:\n  - name: uws\n    address: 127.0.0.1\n    port: ${uwsPort}\n` +
        `  - name: net\n    address: 127.0.0.1\n    port: ${netPort}\n    pipelining: 16\n` +
        `admin:\n  address: 127.0.0.1\n  port: ${adminPort}\n` +
        `pools:\n  - name: gpu\n    nodes:\n      - url: ${node}\n` +
        'routes:\n  - name: all\n    match: {}\n    pool: gpu\n',
      'net',
    );
    await pin(sluice.pid, 1);
    await pin(fleet.pid, 0);
    const urls: Record<string, string> = {
      uws: `http://127.0.0.1:${uwsPort}/debug/echo`,
      net: `http://127.0.0.1:${netPort}/debug/echo`,
    };
    process.stdout.write(
      `engine CPU: ${rounds} rounds of ${duration} s per engine, wrk -t1 -c${connections}, 1 KiB POST to /debug/echo, ` +
        `Sluice pinned to CPU 1, wrk and the node to CPU 0, node ${process.version}\n`,
    );
    // Warm-up: JIT and connection pools settle before anything is measured.
    const warm = Math.max(2, Math.round(duration / 4));
    for (const url of Object.values(urls))
      await run('taskset', ['-c', '0', 'wrk', '-t1', `-c${connections}`, `-d${warm}s`, '-s', single, url]);
    const phases: Phase[] = [];
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? ['uws', 'net'] : ['net', 'uws'];
      for (const engine of order) {
        const p = await phase(engine, urls[engine]!, single, sluice.pid);
        phases.push(p);
        process.stdout.write(
          `round ${r + 1} ${engine.padEnd(4)} ${p.rps.toFixed(0).padStart(7)} req/s  ${p.cpuUsPerReq.toFixed(1).padStart(6)} µs CPU/req  errors ${p.errors}\n`,
        );
      }
    }
    const pipedPhase = await phase('net -p 10', urls['net']!, piped, sluice.pid);
    const uws = median(phases.filter((p) => p.engine === 'uws').map((p) => p.cpuUsPerReq));
    const net = median(phases.filter((p) => p.engine === 'net').map((p) => p.cpuUsPerReq));
    process.stdout.write(
      `\nmedian µs CPU/request: uws ${uws.toFixed(1)}, net ${net.toFixed(1)}; net / uws = ${(net / uws).toFixed(2)}\n` +
        `net engine with 10 pipelined requests per connection: ${pipedPhase.rps.toFixed(0)} req/s, ` +
        `${pipedPhase.cpuUsPerReq.toFixed(1)} µs CPU/req, errors ${pipedPhase.errors}\n`,
    );
  } finally {
    await sluice?.stop();
    await fleet?.close();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
