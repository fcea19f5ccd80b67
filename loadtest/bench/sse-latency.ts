/**
 * `npm run bench:sse-latency`: what Sluice adds to the latency a streaming client sees, the time
 * to first token and the gaps between tokens, measured side by side with the same client talking
 * to the node directly. The bench's stand-in node paces its fixed SSE stream (64 events, one
 * every BENCH_GAP_MS, every stream's next event on the same tick, as a GPU's decode step emits one
 * token for every running sequence). BENCH_STREAMS streams go to the node directly and as many
 * through Sluice (the minimal one-pool configuration) at the same time, each starting the next as
 * soon as its stream ends (their starts spread over one stream's length), for BENCH_ROUNDS rounds
 * of BENCH_DURATION seconds: both targets meet the same node ticks and the same load on the
 * client's core, and neither sits idle between phases (an idle keep-alive connection is closed by
 * the node after 10 s, and an idle process gets memory-reducing collections). Sluice is pinned to
 * CPU 1, the node and this client to CPU 0, as in `npm run bench`.
 *
 * Per round and target, from the client: time to first token (request sent to the first body
 * bytes, which carry the first event) and every gap between two reads of body bytes. The report
 * gives p50/p99/p99.9 of each per target (the median over rounds) and what Sluice adds at p99.
 * Environment: BENCH_DURATION (s, default 15), BENCH_ROUNDS (default 3), BENCH_STREAMS (per
 * target, default 20), BENCH_GAP_MS (default 5). Needs Linux and `taskset`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import { STREAM_BODY, STREAM_CHUNKS } from './chat-fixtures.js';
import { freePort } from '../env/free-port.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';

const run = promisify(execFile);
const duration = Number(process.env['BENCH_DURATION'] ?? 15);
const rounds = Number(process.env['BENCH_ROUNDS'] ?? 3);
const streams = Number(process.env['BENCH_STREAMS'] ?? 20);
const gapMs = Number(process.env['BENCH_GAP_MS'] ?? 5);

/** Latencies of one phase, ms. */
interface Sample {
  ttft: number[];
  gaps: number[];
  streams: number;
  errors: number;
}

/** Pins every thread of `pid` to `cpu`. */
async function pin(pid: number | undefined, cpu: number): Promise<void> {
  if (pid === undefined) throw new Error('no pid to pin');
  await run('taskset', ['-a', '-p', '-c', String(cpu), String(pid)]);
}

/** Starts the bench's stand-in node (paced streams) and resolves with its process and URL. */
async function startNode(): Promise<{ child: ChildProcess; url: string }> {
  const entry = fileURLToPath(new URL('./bench-child.js', import.meta.url));
  const child = spawn(process.execPath, [entry, 'stand-in', '--chunk-gap-ms', String(gapMs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the stand-in node did not start within 10 s')), 10_000);
    child.once('exit', (code) => reject(new Error(`the stand-in node exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  return { child, url };
}

/** One stream: resolves when its body ended (or failed), recording into `s`. */
function oneStream(agent: http.Agent, base: string, s: Sample): Promise<void> {
  return new Promise<void>((resolve) => {
    const sent = performance.now();
    const req = http.request(`${base}/v1/chat/completions`, {
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(STREAM_BODY) },
    });
    let last = -1;
    req.on('response', (res) => {
      if (res.statusCode !== 200) s.errors++;
      res.on('data', () => {
        const now = performance.now();
        if (last < 0) s.ttft.push(now - sent);
        else s.gaps.push(now - last);
        last = now;
      });
      res.on('end', () => {
        s.streams++;
        resolve();
      });
      res.on('error', () => {
        s.errors++;
        resolve();
      });
    });
    req.on('error', () => {
      s.errors++;
      resolve();
    });
    req.end(STREAM_BODY);
  });
}

/** Keep-alive agents by target URL, kept from the warm-up on: phases measure warm connections. */
const agents = new Map<string, http.Agent>();

/** Runs `streams` loops of back-to-back streams against each of `bases` at once for `seconds`. */
async function phase(bases: readonly string[], seconds: number): Promise<Sample[]> {
  const end = performance.now() + seconds * 1000;
  // The loops start spread over one stream's length, as independent clients would, not all at once.
  const spreadMs = (STREAM_CHUNKS * gapMs) / streams;
  const runs = bases.map(async (base) => {
    let agent = agents.get(base);
    if (agent === undefined) {
      agent = new http.Agent({ keepAlive: true, maxSockets: streams });
      agents.set(base, agent);
    }
    const s: Sample = { ttft: [], gaps: [], streams: 0, errors: 0 };
    const loop = async (_: unknown, i: number): Promise<void> => {
      await delay(i * spreadMs);
      while (performance.now() < end) await oneStream(agent, base, s);
    };
    await Promise.all(Array.from({ length: streams }, loop));
    return s;
  });
  return Promise.all(runs);
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

interface Row {
  ttft: [number, number, number];
  gap: [number, number, number];
  streams: number;
  errors: number;
}

function summarise(s: Sample): Row {
  const t = s.ttft.sort((a, b) => a - b);
  const g = s.gaps.sort((a, b) => a - b);
  return {
    ttft: [quantile(t, 0.5), quantile(t, 0.99), quantile(t, 0.999)],
    gap: [quantile(g, 0.5), quantile(g, 0.99), quantile(g, 0.999)],
    streams: s.streams,
    errors: s.errors,
  };
}

const f2 = (n: number): string => n.toFixed(2);

async function main(): Promise<void> {
  let node: ChildProcess | null = null;
  let sluice: SluiceChild | null = null;
  try {
    await pin(process.pid, 0);
    const started = await startNode();
    node = started.child;
    await pin(node.pid, 0);
    const [port, adminPort] = [await freePort(), await freePort()];
    sluice = await startSluiceChild(
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\n` +
        `admin:\n  address: 127.0.0.1\n  port: ${adminPort}\n` +
        `pools:\n  - name: gpu\n    nodes:\n      - url: ${started.url}\n` +
        'routes:\n  - name: all\n    match: {}\n    pool: gpu\n',
      'public',
    );
    await pin(sluice.pid, 1);
    const targets: Record<string, string> = { direct: started.url, sluice: sluice.url };
    process.stdout.write(
      `SSE latency: ${rounds} rounds of ${duration} s, ${streams} streams at once to each target, both at the same time, ` +
        `64 events ${gapMs} ms apart; Sluice pinned to CPU 1, the node and the client to CPU 0, node ${process.version}\n\n` +
        '| round | target | streams | errors | TTFT p50 | p99 | p99.9 | gap p50 | p99 | p99.9 |\n' +
        '| --: | --- | --: | --: | --: | --: | --: | --: | --: | --: |\n',
    );
    // Warm-up: JIT and connection pools settle before anything is measured.
    const names = ['direct', 'sluice'];
    const bases = names.map((t) => targets[t]!);
    await phase(bases, Math.max(2, Math.round(duration / 4)));
    const rows: Record<string, Row[]> = { direct: [], sluice: [] };
    for (let r = 0; r < rounds; r++) {
      const samples = await phase(bases, duration);
      for (let k = 0; k < names.length; k++) {
        const t = names[k]!;
        const row = summarise(samples[k]!);
        rows[t]!.push(row);
        process.stdout.write(
          `| ${r + 1} | ${t} | ${row.streams} | ${row.errors} | ${row.ttft.map(f2).join(' | ')} | ${row.gap.map(f2).join(' | ')} |\n`,
        );
      }
    }
    const med = (t: string, pick: (row: Row) => number): number => median(rows[t]!.map(pick));
    process.stdout.write(
      '\nmedian over rounds, ms:\n\n| target | TTFT p50 | p99 | p99.9 | gap p50 | p99 | p99.9 |\n| --- | --: | --: | --: | --: | --: | --: |\n',
    );
    for (const t of ['direct', 'sluice']) {
      const cols = [0, 1, 2]
        .map((i) => med(t, (row) => row.ttft[i]!))
        .concat([0, 1, 2].map((i) => med(t, (row) => row.gap[i]!)));
      process.stdout.write(`| ${t} | ${cols.map(f2).join(' | ')} |\n`);
    }
    const added = (pick: (row: Row) => number): string =>
      f2(median(rows['sluice']!.map((row, i) => pick(row) - pick(rows['direct']![i]!))));
    process.stdout.write(
      `\nadded by Sluice at p99 (median over rounds of sluice − direct in the same round): ` +
        `time to first token ${added((row) => row.ttft[1])} ms, gap between events ${added((row) => row.gap[1])} ms\n`,
    );
  } finally {
    for (const a of agents.values()) a.destroy();
    await sluice?.stop();
    node?.kill('SIGTERM');
  }
}

await main();
