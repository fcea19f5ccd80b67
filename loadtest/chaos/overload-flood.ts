/**
 * Overload of Sluice itself, for real: a Sluice process with overload protection is flooded with
 * long conversations (a pool that weighs work parses every JSON body to estimate its tokens, so
 * each request costs CPU) from many connections at once, until its event loop runs late. Checks: Sluice sheds with 503
 * `proxy_overloaded` + Retry-After rather than failing in any other way, every other answer is a
 * whole 200, and once the flood stops it takes requests again.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { stopChild, type Child } from '../env/child-process.js';
import { startSimChild } from '../env/fleet-handle.js';
import { freePort } from '../env/free-port.js';
import { serveChild } from '../env/sluice-process.js';

/** How a run goes. */
export interface FloodOptions {
  /** Length of the flood, ms. Default 6000. */
  durationMs?: number;
  /** Concurrent client loops. Default 64. */
  clients?: number;
  /** Messages per request (each a small object: parsing them is what costs). Default 6000. */
  messages?: number;
}

/** What the run saw. */
export interface FloodResult {
  ok: number;
  shed: number;
  /** Anything but 200 or a well-formed 503 `proxy_overloaded` with Retry-After. */
  other: Record<string, number>;
  /** p50 and p99 of the 200 answers, ms. */
  okP50Ms: number;
  okP99Ms: number;
  /** Time from the end of the flood to the first 200, ms (NaN: never). */
  recoveredMs: number;
  /** Shedding episodes Sluice counted. */
  episodes: number;
  /** Requests Sluice counted as shed. */
  shedBySluice: number;
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]!;
}

/** Runs the flood against a Sluice child in front of a simulated node; counts, never throws on answers. */
export async function runOverloadFlood(opts: FloodOptions = {}): Promise<FloodResult> {
  const durationMs = opts.durationMs ?? 6000;
  const clients = opts.clients ?? 64;
  const messages = Array.from({ length: opts.messages ?? 6000 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `turn ${i}`,
  }));
  const dir = await mkdtemp(join(tmpdir(), 'sluice-flood-'));
  const agent = new Agent({ connections: clients, keepAliveTimeout: 30_000 });
  let fleet: Child | null = null;
  let sluice: Child | null = null;
  const result: FloodResult = {
    ok: 0,
    shed: 0,
    other: {},
    okP50Ms: NaN,
    okP99Ms: NaN,
    recoveredMs: NaN,
    episodes: 0,
    shedBySluice: 0,
  };
  try {
    const sim = await startSimChild(2, 'fast');
    fleet = sim.child;
    const urls = sim.urls;
    const port = await freePort();
    const adminPort = await freePort();
    const file = join(dir, 'sluice.yaml');
    await writeFile(
      file,
      `listeners:
  - name: public
    address: 127.0.0.1
    port: ${port}
    max_body_bytes: 4194304
admin:
  address: 127.0.0.1
  port: ${adminPort}
server:
  overload: { event_loop_delay_ms: 40, sample_interval_ms: 100, min_shed_ms: 500, retry_after_ms: 1000 }
pools:
  - name: gpu
    balance: { kind: least-request }
    nodes:
${urls.map((u) => `      - url: ${u}`).join('\n')}
routes:
  - name: all
    match: {}
    pool: gpu
`,
    );
    sluice = await serveChild(file);
    const url = `http://127.0.0.1:${port}/v1/chat/completions`;
    const body = JSON.stringify({ model: 'm', messages, max_tokens: 2 });
    const okTimes: number[] = [];
    const count = (what: string): void => {
      result.other[what] = (result.other[what] ?? 0) + 1;
    };
    /** One request; returns its status (0: failed without one). */
    const send = async (payload: string): Promise<number> => {
      const t0 = performance.now();
      try {
        const r = await request(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: payload,
          dispatcher: agent,
        });
        const text = await r.body.text();
        if (r.statusCode === 200) {
          okTimes.push(performance.now() - t0);
          result.ok++;
        } else if (
          r.statusCode === 503 &&
          text.includes('"proxy_overloaded"') &&
          r.headers['retry-after'] === '1'
        )
          result.shed++;
        else count(`http_${r.statusCode}`);
        return r.statusCode;
      } catch (e) {
        const err = e as { code?: string; cause?: { code?: string } };
        count(err.cause?.code ?? err.code ?? 'error');
        return 0;
      }
    };
    const end = performance.now() + durationMs;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < end) await send(body);
      }),
    );
    const stopped = performance.now();
    const small = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    while (performance.now() - stopped < 10_000) {
      if ((await send(small)) === 200) {
        result.recoveredMs = performance.now() - stopped;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const metrics = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
    result.episodes = Number(/^sluice_overload_episodes_total (\d+)$/m.exec(metrics)?.[1] ?? 0);
    result.shedBySluice = Number(/^sluice_overload_shed_total (\d+)$/m.exec(metrics)?.[1] ?? 0);
    okTimes.sort((a, b) => a - b);
    result.okP50Ms = quantile(okTimes, 0.5);
    result.okP99Ms = quantile(okTimes, 0.99);
  } finally {
    await agent.close();
    if (sluice !== null) await stopChild(sluice);
    if (fleet !== null) await stopChild(fleet);
    await rm(dir, { recursive: true, force: true });
  }
  return result;
}

/** The problems of a run (empty: it passed). */
export function floodProblems(r: FloodResult): string[] {
  const problems: string[] = [];
  if (r.shed === 0 || r.episodes === 0) problems.push('Sluice never shed');
  if (Object.keys(r.other).length > 0) problems.push(`other answers: ${JSON.stringify(r.other)}`);
  if (r.ok === 0) problems.push('no request was served during the flood');
  if (!(r.recoveredMs < 10_000)) problems.push('Sluice did not take requests again after the flood');
  return problems;
}
