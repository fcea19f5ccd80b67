/**
 * Certificate swaps under TLS traffic: a Sluice process with a TLS listener (certificates made on
 * the spot) takes requests on long-lived keep-alive connections and on a new connection each,
 * while its certificate files are replaced and reloaded once a second. Checks: no request fails,
 * new connections see the new certificates, and connections opened before a swap keep working.
 */
import { copyFile, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { connect, type TLSSocket } from 'node:tls';
import { stopChild, type Child } from '../env/child-process.js';
import { freePort } from '../env/free-port.js';
import { serveChild } from '../env/sluice-process.js';
import { makeSelfSigned } from '../env/self-signed.js';
import { startSimFleet } from '../sim/fleet.js';

/** How a run goes. */
export interface TlsSwapOptions {
  /** Length of the run, ms. Default 10 000. */
  durationMs?: number;
  /** Clients on one keep-alive connection each, and clients on a new connection per request. Default 8 and 4. */
  keepAliveClients?: number;
  freshClients?: number;
}

/** What the run saw. */
export interface TlsSwapResult {
  requests: number;
  /** TLS connections opened. */
  connections: number;
  failures: string[];
  swaps: number;
  /** Distinct certificates (common names) new connections were given. */
  certsSeen: number;
  /** Requests served on a connection opened before the latest swap at the time. */
  oldConnectionsServed: number;
}

const BODY = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}';
const REQUEST = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`;

/** One TLS connection sending requests one at a time and reading sized answers. */
async function openTls(port: number): Promise<{ socket: TLSSocket; cn: string; ask: () => Promise<number> }> {
  const socket = await new Promise<TLSSocket>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => resolve(s));
    s.once('error', reject);
  });
  let buf = Buffer.alloc(0);
  let wake: (() => void) | null = null;
  let closed = false;
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    wake?.();
  });
  socket.on('close', () => {
    closed = true;
    wake?.();
  });
  socket.on('error', () => undefined);
  const ask = async (): Promise<number> => {
    socket.write(REQUEST);
    const deadline = performance.now() + 10_000;
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = buf.subarray(0, end).toString('latin1');
        const need = end + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length >= need) {
          buf = buf.subarray(need);
          return Number(head.slice(9, 12));
        }
      }
      if (closed) throw new Error('connection closed');
      if (performance.now() > deadline) throw new Error('no answer within 10 s');
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 200);
      });
    }
  };
  return { socket, cn: String(socket.getPeerCertificate().subject.CN), ask };
}

/** Runs the scenario; never throws for a failed request (they are listed). */
export async function runTlsSwap(opts: TlsSwapOptions = {}): Promise<TlsSwapResult> {
  const durationMs = opts.durationMs ?? 10_000;
  const dir = await mkdtemp(join(tmpdir(), 'sluice-tls-swap-'));
  const fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
  let sluice: Child | null = null;
  const result: TlsSwapResult = {
    requests: 0,
    connections: 0,
    failures: [],
    swaps: 0,
    certsSeen: 0,
    oldConnectionsServed: 0,
  };
  const names = new Set<string>();
  try {
    const certs = [
      await makeSelfSigned(dir, 'one', 'cert-one'),
      await makeSelfSigned(dir, 'two', 'cert-two'),
    ];
    const install = async (i: number): Promise<void> => {
      const c = certs[i % 2]!;
      await copyFile(c.keyFile, join(dir, 'tls.key.new'));
      await copyFile(c.certFile, join(dir, 'tls.crt.new'));
      await rename(join(dir, 'tls.key.new'), join(dir, 'tls.key'));
      await rename(join(dir, 'tls.crt.new'), join(dir, 'tls.crt'));
    };
    await install(0);
    const port = await freePort();
    const adminPort = await freePort();
    const file = join(dir, 'sluice.yaml');
    await writeFile(
      file,
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\n    tls: { cert_file: tls.crt, key_file: tls.key }\nadmin:\n  address: 127.0.0.1\n  port: ${adminPort}\npools:\n  - name: gpu\n    nodes:\n${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}\nroutes:\n  - name: all\n    match: {}\n    pool: gpu\n`,
    );
    sluice = await serveChild(file);
    const end = performance.now() + durationMs;
    let lastSwapAt = 0;
    const keepAlive = async (): Promise<void> => {
      let c: Awaited<ReturnType<typeof openTls>> | null = null;
      try {
        c = await openTls(port);
        result.connections++;
        const openedAt = performance.now();
        while (performance.now() < end) {
          const status = await c.ask();
          if (status !== 200) result.failures.push(`keep-alive: status ${status}`);
          else {
            result.requests++;
            if (openedAt < lastSwapAt) result.oldConnectionsServed++;
          }
        }
      } catch (e) {
        result.failures.push(`keep-alive: ${(e as Error).message}`);
      } finally {
        c?.socket.destroy();
      }
    };
    const fresh = async (): Promise<void> => {
      while (performance.now() < end) {
        try {
          const c = await openTls(port);
          result.connections++;
          names.add(c.cn);
          const status = await c.ask();
          c.socket.end();
          if (status !== 200) result.failures.push(`new connection: status ${status}`);
          else result.requests++;
        } catch (e) {
          result.failures.push(`new connection: ${(e as Error).message}`);
        }
      }
    };
    const swapper = async (): Promise<void> => {
      let i = 1;
      while (performance.now() + 1000 < end) {
        await new Promise((r) => setTimeout(r, 1000));
        await install(i++);
        try {
          const res = await fetch(`http://127.0.0.1:${adminPort}/admin/reload`, { method: 'POST' });
          const body = (await res.json()) as { certificates?: string[] };
          if (res.status === 200 && body.certificates?.length === 1) {
            result.swaps++;
            lastSwapAt = performance.now();
          } else result.failures.push(`reload: ${res.status} ${JSON.stringify(body)}`);
        } catch (e) {
          result.failures.push(`reload: ${(e as Error).message} (is Sluice still running?)`);
          return;
        }
      }
    };
    await Promise.all([
      ...Array.from({ length: opts.keepAliveClients ?? 8 }, keepAlive),
      ...Array.from({ length: opts.freshClients ?? 4 }, fresh),
      swapper(),
    ]);
    result.certsSeen = names.size;
  } finally {
    if (sluice !== null) await stopChild(sluice);
    await fleet.close();
    await rm(dir, { recursive: true, force: true });
  }
  return result;
}

/** The problems of a run (empty: it passed). */
export function tlsSwapProblems(r: TlsSwapResult): string[] {
  const problems: string[] = [];
  if (r.failures.length > 0)
    problems.push(`${r.failures.length} failures: ${r.failures.slice(0, 3).join('; ')}`);
  if (r.swaps === 0) problems.push('no certificate was swapped');
  if (r.swaps > 0 && r.certsSeen < 2) problems.push('new connections never saw the new certificate');
  if (r.swaps > 0 && r.oldConnectionsServed === 0)
    problems.push('no connection older than a swap was served');
  return problems;
}
