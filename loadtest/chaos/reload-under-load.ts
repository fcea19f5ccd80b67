/**
 * Reload under load: Sluice as a real process behind simulated nodes (another process) takes a
 * steady request rate (autocannon, open loop) and a set of long SSE streams that reopen as they
 * end, while its config file is rewritten and reloaded once per period, alternating a valid and an
 * invalid file. Checks: no request or stream fails, every valid file is applied and every invalid
 * one rejected with the previous plan kept, and the process's open file descriptors do not grow.
 */
import { readdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { Agent, request } from 'undici';
import { stopChild, type Child } from '../env/child-process.js';
import { startSimChild } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { rssMiB } from '../env/proc-stats.js';
import { serveChild } from '../env/sluice-process.js';

/** How a run goes. */
export interface ReloadLoadOptions {
  /** Length of the loaded phase, ms. Default 30 000. */
  durationMs?: number;
  /** Plain requests per second (open loop). Default 1000. */
  rate?: number;
  /** SSE streams kept open. Default 100. */
  streams?: number;
  /** Time between reloads, ms. Default 1000. */
  reloadEveryMs?: number;
}

/** What the run saw. */
export interface ReloadLoadResult {
  durationMs: number;
  /** Plain requests answered 200, and their rate. */
  requests: number;
  requestsPerSecond: number;
  /** Plain requests that got another status, a connection error or a timeout. */
  requestFailures: number;
  /** p99 latency of plain requests, ms. */
  p99Ms: number;
  streamsCompleted: number;
  streamFailures: string[];
  reloadsApplied: number;
  reloadsRejected: number;
  /** Reloads whose outcome was not the one expected (a valid file rejected, an invalid applied). */
  reloadSurprises: string[];
  /** Open descriptors of the Sluice process, sampled once per second during the loaded phase. */
  fds: number[];
  /** Mean descriptors over the middle and the last third of the samples (the first is ramp-up). */
  fdsEarly: number;
  fdsLate: number;
  rssMb: number[];
}

function config(port: number, admin: number, nodes: readonly string[], variant: number): string {
  // Valid variants differ in weights (a new plan each time, same nodes); the invalid one has a typo.
  const weights = variant % 2 === 0 ? [1, 1, 1, 1] : [2, 1, 1, 2];
  const body = `listeners:
  - name: public
    address: 127.0.0.1
    port: ${port}
admin:
  address: 127.0.0.1
  port: ${admin}
pools:
  - name: gpu
    balance: { kind: least-request }
    nodes:
${nodes.map((u, i) => `      - url: ${u}\n        weight: ${weights[i % 4]}`).join('\n')}
routes:
  - name: all
    match: {}
    pool: gpu
`;
  return variant < 0 ? body.replace('    pool: gpu\n', '    pool: gpu\n    poool: typo\n') : body;
}

async function fdCount(pid: number): Promise<number> {
  return (await readdir(`/proc/${pid}/fd`)).length;
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** Runs the scenario (Linux: reads /proc). Never throws for a failed request: they are counted. */
export async function runReloadUnderLoad(opts: ReloadLoadOptions = {}): Promise<ReloadLoadResult> {
  const durationMs = opts.durationMs ?? 30_000;
  const rate = opts.rate ?? 1000;
  const streamCount = opts.streams ?? 100;
  const reloadEveryMs = opts.reloadEveryMs ?? 1000;
  const dir = await mkdtemp(join(tmpdir(), 'sluice-reload-load-'));
  let fleet: Child | null = null;
  let sluice: Child | null = null;
  const agent = new Agent({ connections: streamCount, keepAliveTimeout: 30_000 });
  const result: ReloadLoadResult = {
    durationMs,
    requests: 0,
    requestsPerSecond: 0,
    requestFailures: 0,
    p99Ms: NaN,
    streamsCompleted: 0,
    streamFailures: [],
    reloadsApplied: 0,
    reloadsRejected: 0,
    reloadSurprises: [],
    fds: [],
    fdsEarly: NaN,
    fdsLate: NaN,
    rssMb: [],
  };
  try {
    const sim = await startSimChild(4, 'fast');
    fleet = sim.child;
    const urls = sim.urls;
    const port = await freePort();
    const adminPort = await freePort();
    const file = join(dir, 'sluice.yaml');
    await writeFile(file, config(port, adminPort, urls, 0));
    sluice = await serveChild(file);
    const pid = sluice.process.pid!;
    const base = `http://127.0.0.1:${port}`;
    const admin = `http://127.0.0.1:${adminPort}`;
    let stop = false;

    const streamLoop = async (): Promise<void> => {
      while (!stop) {
        try {
          const r = await request(`${base}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '40' },
            body: '{"model":"m","messages":[{"role":"user","content":"stream"}],"max_tokens":50,"stream":true}',
            dispatcher: agent,
          });
          const text = await r.body.text();
          if (r.statusCode === 200 && text.trimEnd().endsWith('data: [DONE]') && !text.includes('"error"'))
            result.streamsCompleted++;
          else result.streamFailures.push(`status ${r.statusCode}: ${text.slice(-120)}`);
        } catch (e) {
          result.streamFailures.push(String(e));
        }
      }
    };

    const reloader = async (): Promise<void> => {
      let variant = 1;
      let version = 1;
      let valid = true;
      while (!stop) {
        await new Promise((r) => setTimeout(r, reloadEveryMs));
        if (stop) break;
        await writeFile(file, config(port, adminPort, urls, valid ? variant++ : -1));
        const res = await fetch(`${admin}/admin/reload`, { method: 'POST' });
        const body = (await res.json()) as { result: string; version: number };
        if (valid) {
          if (body.result === 'applied' && body.version === version + 1) {
            result.reloadsApplied++;
            version = body.version;
          } else result.reloadSurprises.push(`valid file: ${res.status} ${JSON.stringify(body)}`);
        } else if (res.status === 422 && body.result === 'rejected' && body.version === version) {
          result.reloadsRejected++;
          const active = (await (await fetch(`${admin}/admin/config`)).json()) as { version: number };
          if (active.version !== version)
            result.reloadSurprises.push(`active version ${active.version} after a rejection`);
        } else result.reloadSurprises.push(`invalid file: ${res.status} ${JSON.stringify(body)}`);
        valid = !valid;
      }
    };

    const sampler = async (): Promise<void> => {
      while (!stop) {
        await new Promise((r) => setTimeout(r, 1000));
        if (stop) break;
        result.fds.push(await fdCount(pid));
        result.rssMb.push(Math.round(await rssMiB(pid)));
      }
    };

    // Warm up: connections to the nodes and the streams opened before measuring anything.
    const streams = Array.from({ length: streamCount }, () => streamLoop());
    const warm = await autocannon({
      url: `${base}/v1/chat/completions`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}',
      connections: 32,
      duration: 2,
      overallRate: rate,
    });
    if (warm.non2xx > 0 || warm.errors > 0) result.requestFailures += warm.non2xx + warm.errors;
    const t0 = performance.now();
    const side = [reloader(), sampler()];
    const run = await autocannon({
      url: `${base}/v1/chat/completions`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}',
      connections: 32,
      duration: durationMs / 1000,
      overallRate: rate,
      timeout: 10,
    });
    const elapsed = performance.now() - t0;
    stop = true;
    await Promise.all(side);
    await Promise.all(streams);
    result.requests = run['2xx'];
    result.requestsPerSecond = Math.round(run['2xx'] / (elapsed / 1000));
    result.requestFailures += run.non2xx + run.errors + run.timeouts;
    result.p99Ms = run.latency.p99;
    const third = Math.max(1, Math.floor(result.fds.length / 3));
    result.fdsEarly = mean(result.fds.slice(third, 2 * third));
    result.fdsLate = mean(result.fds.slice(-third));
  } finally {
    await agent.close();
    if (sluice !== null) await stopChild(sluice);
    if (fleet !== null) await stopChild(fleet);
    await rm(dir, { recursive: true, force: true });
  }
  return result;
}

/**
 * The problems of a run (empty: it passed). The request rate reached is not judged here: on a
 * shared machine it says more about the machine than about Sluice; callers report it.
 */
export function reloadLoadProblems(r: ReloadLoadResult): string[] {
  const problems: string[] = [];
  if (r.requestFailures > 0) problems.push(`${r.requestFailures} requests failed`);
  if (r.streamFailures.length > 0)
    problems.push(`${r.streamFailures.length} streams failed: ${r.streamFailures[0]}`);
  if (r.reloadSurprises.length > 0) problems.push(...r.reloadSurprises);
  if (r.reloadsApplied === 0 || r.reloadsRejected === 0)
    problems.push('valid and invalid reloads did not both happen');
  // Descriptors belong to connections, which come and go with the load: a leak grows with every
  // reload, far beyond the jitter of a few connections.
  if (r.fdsLate > r.fdsEarly + 16)
    problems.push(`descriptors grew from ${r.fdsEarly.toFixed(0)} to ${r.fdsLate.toFixed(0)}`);
  return problems;
}
