/**
 * `npm run bench:slowloris`: 1,000 slowloris connections against a Sluice child while autocannon
 * sends normal requests, on each downstream engine in turn. Each attacking connection sends a
 * partial head and one more header byte every few seconds, and reconnects when Sluice closes it,
 * so about 1,000 stay open. Prints normal-traffic p99 before, during and after the attack, the
 * connections Sluice held, and its RSS and open file descriptors before and after (from /proc).
 * Loopback only, every phase bounded in time. Environment: BENCH_DURATION (s per phase, default
 * 15, longer than the 10 s head deadline so slow heads are cut during the phase), BENCH_SLOW_CONNECTIONS (default 1000), BENCH_ENGINES (default `uws,net`).
 */
import { connect, type Socket } from 'node:net';
import autocannon from 'autocannon';
import { startOneFastNode, type FleetHandle } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { openFds, rssMiB } from '../env/proc-stats.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';

const duration = Number(process.env['BENCH_DURATION'] ?? 15);
const slowCount = Number(process.env['BENCH_SLOW_CONNECTIONS'] ?? 1000);
const engines = (process.env['BENCH_ENGINES'] ?? 'uws,net').split(',');
/** Seconds between two bytes of a slow head: under every head deadline, so only the total counts. */
const DRIP_S = 3;

/** Resident set size (KiB) and open descriptors of `pid`. */
async function footprint(pid: number | undefined): Promise<{ rssKiB: number; fds: number }> {
  return { rssKiB: (await rssMiB(pid)) * 1024, fds: await openFds(pid) };
}

/** The slow clients: each keeps one connection sending a head that never ends. */
class Slowloris {
  private readonly sockets = new Set<Socket>();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** Connections Sluice closed on its own (deadline or cap). */
  closedByServer = 0;

  constructor(
    private readonly port: number,
    private readonly count: number,
  ) {}

  start(): void {
    for (let i = 0; i < this.count; i++) this.open();
    this.timer = setInterval(() => {
      for (const s of this.sockets) s.write('a');
    }, DRIP_S * 1000);
  }

  private open(): void {
    if (this.stopped) return;
    const s = connect({ host: '127.0.0.1', port: this.port });
    s.on('error', () => undefined);
    // Read (and drop) what Sluice answers, so its close is seen and the attacker reconnects.
    s.resume();
    s.on('connect', () => s.write('GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nX-Slow: '));
    s.on('close', () => {
      this.sockets.delete(s);
      if (this.stopped) return;
      this.closedByServer++;
      setImmediate(() => this.open());
    });
    this.sockets.add(s);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    for (const s of this.sockets) s.destroy();
  }
}

async function p99(url: string): Promise<{ p99: number; rps: number; errors: number }> {
  const r = await autocannon({ url, connections: 10, duration });
  return { p99: r.latency.p99, rps: r.requests.average, errors: r.errors + r.timeouts + r.non2xx };
}

async function connectionsHeld(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(/^sluice_listener_connections\{listener="public"\} (\d+)/m.exec(text)?.[1] ?? -1);
}

async function runEngine(engine: string, node: string): Promise<void> {
  const [port, adminPort] = [await freePort(), await freePort()];
  let sluice: SluiceChild | null = null;
  let attack: Slowloris | null = null;
  try {
    sluice = await startSluiceChild(
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\n    pipelining: ${engine === 'net' ? 16 : 0}\n` +
        `admin:\n  address: 127.0.0.1\n  port: ${adminPort}\n` +
        `pools:\n  - name: gpu\n    nodes:\n      - url: ${node}\n` +
        'routes:\n  - name: all\n    match: {}\n    pool: gpu\n',
      'public',
    );
    const url = `${sluice.url}/v1/models`;
    const admin = `http://127.0.0.1:${adminPort}`;
    await autocannon({ url, connections: 10, duration: 2 }); // warm-up
    const base = await p99(url);
    // Measured after normal traffic, so the footprint compared is that of the same traffic.
    const before = await footprint(sluice.pid);
    attack = new Slowloris(port, slowCount);
    attack.start();
    await new Promise((r) => setTimeout(r, 2000));
    const held = await connectionsHeld(admin);
    const during = await p99(url);
    const heldEnd = await connectionsHeld(admin);
    const closed = attack.closedByServer;
    attack.stop();
    attack = null;
    // Let Sluice notice the closes, then measure the footprint and a last baseline.
    const deadline = Date.now() + 15_000;
    while ((await connectionsHeld(admin)) > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 200));
    const base2 = await p99(url);
    const after = await footprint(sluice.pid);
    const ratio = during.p99 / base.p99;
    process.stdout.write(
      `${engine}: p99 ${base.p99} ms before, ${during.p99} ms under attack (${ratio.toFixed(2)}x), ${base2.p99} ms after; ` +
        `req/s ${base.rps.toFixed(0)} / ${during.rps.toFixed(0)} / ${base2.rps.toFixed(0)}; errors ${base.errors}/${during.errors}/${base2.errors}; ` +
        `connections held ${held} at start and ${heldEnd} at the end of the attack, ${closed} slow connections closed by Sluice; ` +
        `RSS ${Math.round(before.rssKiB / 1024)} MiB -> ${Math.round(after.rssKiB / 1024)} MiB, fds ${before.fds} -> ${after.fds}\n`,
    );
  } finally {
    attack?.stop();
    await sluice?.stop();
  }
}

async function main(): Promise<void> {
  let fleet: FleetHandle | null = null;
  try {
    fleet = await startOneFastNode();
    process.stdout.write(
      `slowloris: ${slowCount} slow connections (a header byte every ${DRIP_S} s, reconnecting when closed), ` +
        `autocannon -c 10 -d ${duration} GET /v1/models, node ${process.version}\n`,
    );
    for (const engine of engines) await runEngine(engine, fleet.urls[0]!);
  } finally {
    await fleet?.close();
  }
}

await main();
