/**
 * `npm run bench`: proxy overhead measured side by side in one run. autocannon drives the same
 * 1 KiB POST at one simulated node directly, through a bare uWS + undici forwarder, and through
 * Sluice (each in its own process, loopback only, each phase bounded in time), and prints
 * requests/s, latency percentiles, CPU time per request of the proxy process (from /proc) and the
 * ratios. Environment: BENCH_DURATION (s, default 10), BENCH_CONNECTIONS (default 50).
 */
import autocannon from 'autocannon';
import { cpuSeconds, startChild, stopChild, type Child } from '../env/child-process.js';
import { startFleet, type FleetHandle } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';
import { LoadtestErrorCode } from '../loadtest-error.js';
import { loadSimProfile } from '../sim/profile-loader.js';

const duration = Number(process.env['BENCH_DURATION'] ?? 10);
const connections = Number(process.env['BENCH_CONNECTIONS'] ?? 50);
const body = JSON.stringify({ model: 'bench', input: 'x'.repeat(1000) });
const START_TIMEOUT_MS = 15_000;
const BARE_LINE = /^bare forwarder listening on (http:\/\/\S+)/;

interface Phase {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  errors: number;
  cpuUsPerReq: number | null;
}

async function phase(name: string, url: string, pid: number | undefined): Promise<Phase> {
  const before = await cpuSeconds(pid);
  const r = await autocannon({
    url,
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json' },
    connections,
    duration,
  });
  const after = await cpuSeconds(pid);
  const requests = r.requests.total;
  return {
    name,
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    requests,
    errors: r.errors + r.non2xx + r.timeouts,
    cpuUsPerReq:
      before === null || after === null || requests === 0 ? null : ((after - before) * 1e6) / requests,
  };
}

async function main(): Promise<void> {
  let fleet: FleetHandle | null = null;
  let sluice: SluiceChild | null = null;
  let bare: Child | null = null;
  try {
    fleet = await startFleet({
      nodes: 1,
      profile: loadSimProfile('fast'),
      speedFactors: [1],
      process: 'child',
    });
    const node = fleet.urls[0] as string;
    let bareUrl = '';
    // The baseline stands where Sluice would, so it fails to start under Sluice's code.
    bare = await startChild(
      ['bare-forwarder', '0', node],
      (line) => {
        bareUrl = BARE_LINE.exec(line)?.[1] ?? bareUrl;
        return bareUrl !== '';
      },
      { code: LoadtestErrorCode.sluiceStartFailed, what: 'the bare forwarder' },
      START_TIMEOUT_MS,
    );
    const [port, adminPort] = [await freePort(), await freePort()];
    sluice = await startSluiceChild(
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\n` +
        `admin:\n  address: 127.0.0.1\n  port: ${adminPort}\n` +
        `pools:\n  - name: gpu\n    nodes:\n      - url: ${node}\n` +
        'routes:\n  - name: all\n    match: {}\n    pool: gpu\n',
      'public',
    );
    const echo = (base: string): string => `${base}/debug/echo`;
    process.stdout.write(
      `proxy overhead: ${duration} s per phase, ${connections} connections, 1 KiB POST to /debug/echo, node ${process.version}\n`,
    );
    // A short warm-up so JIT and connection pools are settled before anything is measured.
    await autocannon({ url: echo(sluice.url), method: 'POST', body, connections, duration: 2 });
    await autocannon({ url: echo(bareUrl), method: 'POST', body, connections, duration: 2 });
    const direct = await phase('direct to node', echo(node), undefined);
    const bareRes = await phase('bare uWS+undici', echo(bareUrl), bare.process.pid);
    const sluiceRes = await phase('sluice', echo(sluice.url), sluice.pid);
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
    await sluice?.stop();
    if (bare !== null) await stopChild(bare);
    await fleet?.close();
  }
}

await main();
