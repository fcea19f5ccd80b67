/**
 * `npm run bench`: proxy overhead measured side by side in one run. autocannon drives the same
 * 1 KiB POST at one simulated node directly, through a bare uWS + undici forwarder, and through
 * Sluice (each in its own process, loopback only, each phase bounded in time), and prints
 * requests/s, latency percentiles, CPU time per request of the proxy process (from /proc) and the
 * ratios. Environment: BENCH_DURATION (s, default 10), BENCH_CONNECTIONS (default 50).
 */
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, mkdtemp, writeFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../env/free-port.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const duration = Number(process.env['BENCH_DURATION'] ?? 10);
const connections = Number(process.env['BENCH_CONNECTIONS'] ?? 50);
const body = JSON.stringify({ model: 'bench', input: 'x'.repeat(1000) });

function start(args: string[]): ChildProcess {
  const child = spawn(process.execPath, args, {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, SLUICE_LOG_LEVEL: 'warn' },
  });
  child.on('exit', (code, sig) => {
    if (code !== 0 && code !== null) process.stderr.write(`bench: ${args.join(' ')} exited ${code ?? sig}\n`);
  });
  return child;
}

async function waitUp(url: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      const r = await fetch(url, { method: 'POST', body: '{}' });
      await r.arrayBuffer();
      if (r.status < 500) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`bench: ${url} did not come up`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** CPU seconds (user + system) a process has used, from /proc/PID/stat. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields after the command: state is index 0, utime index 11, stime index 12 (clock ticks).
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface Phase {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  errors: number;
  cpuUsPerReq: number | null;
}

async function phase(name: string, url: string, pid: number | null): Promise<Phase> {
  const before = pid === null ? 0 : await cpuSeconds(pid);
  const r = await autocannon({
    url,
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json' },
    connections,
    duration,
  });
  const after = pid === null ? 0 : await cpuSeconds(pid);
  const requests = r.requests.total;
  return {
    name,
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    requests,
    errors: r.errors + r.non2xx + r.timeouts,
    cpuUsPerReq: pid === null || requests === 0 ? null : ((after - before) * 1e6) / requests,
  };
}

async function main(): Promise<void> {
  const [simPort, barePort, sluicePort, adminPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const dir = await mkdtemp(join(tmpdir(), 'sluice-bench-'));
  const config = join(dir, 'bench.yaml');
  await writeFile(
    config,
    `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${sluicePort}\nadmin:\n  port: ${adminPort}\n` +
      `pools:\n  - name: gpu\n    nodes:\n      - url: http://127.0.0.1:${simPort}\nroutes:\n  - name: all\n    match: {}\n    pool: gpu\n`,
  );
  const children: ChildProcess[] = [];
  try {
    children.push(
      start([
        join(root, 'bin', 'sluice.js'),
        'sim',
        '--nodes',
        '1',
        '--port',
        String(simPort),
        '--profile',
        'fast',
      ]),
    );
    const bare = start([join(here, 'bare-forwarder.js'), String(barePort), `http://127.0.0.1:${simPort}`]);
    const sluice = start([join(root, 'bin', 'sluice.js'), 'serve', '--config', config, '--no-watch']);
    children.push(bare, sluice);
    const target = (port: number): string => `http://127.0.0.1:${port}/debug/echo`;
    await Promise.all([waitUp(target(simPort)), waitUp(target(barePort)), waitUp(target(sluicePort))]);
    process.stdout.write(
      `proxy overhead: ${duration} s per phase, ${connections} connections, 1 KiB POST to /debug/echo, node ${process.version}\n`,
    );
    // A short warm-up so JIT and connection pools are settled before anything is measured.
    await autocannon({ url: target(sluicePort), method: 'POST', body, connections, duration: 2 });
    await autocannon({ url: target(barePort), method: 'POST', body, connections, duration: 2 });
    const direct = await phase('direct to node', target(simPort), null);
    const bareRes = await phase('bare uWS+undici', target(barePort), bare.pid ?? null);
    const sluiceRes = await phase('sluice', target(sluicePort), sluice.pid ?? null);
    const rows = [direct, bareRes, sluiceRes];
    const pad = (s: string, n: number): string => s.padEnd(n);
    process.stdout.write(
      `\n${pad('target', 18)}${pad('req/s', 10)}${pad('p50 ms', 9)}${pad('p99 ms', 9)}${pad('errors', 8)}proxy CPU µs/req\n`,
    );
    for (const p of rows) {
      process.stdout.write(
        `${pad(p.name, 18)}${pad(p.rps.toFixed(0), 10)}${pad(String(p.p50), 9)}${pad(String(p.p99), 9)}${pad(String(p.errors), 8)}${p.cpuUsPerReq === null ? '-' : p.cpuUsPerReq.toFixed(1)}\n`,
      );
    }
    const ratio = (a: number, b: number): string => (b === 0 ? '-' : (a / b).toFixed(2));
    process.stdout.write(`\nsluice / direct throughput: ${ratio(sluiceRes.rps, direct.rps)}\n`);
    process.stdout.write(`sluice / bare throughput:   ${ratio(sluiceRes.rps, bareRes.rps)}\n`);
    if (sluiceRes.cpuUsPerReq !== null && bareRes.cpuUsPerReq !== null) {
      process.stdout.write(
        `sluice / bare CPU per request: ${ratio(sluiceRes.cpuUsPerReq, bareRes.cpuUsPerReq)}\n`,
      );
    }
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
