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
 * CPU 1, the node and this client to CPU 0, as in `npm run bench` (and with its processes,
 * configuration and HDR histograms).
 *
 * Per round and target, from the client: time to first token (request sent to the first body
 * bytes, which carry the first event) and every gap between two reads of body bytes. The report
 * gives p50/p99/p99.9 of each per target (the median over rounds) and what Sluice adds at p99.
 * Environment: BENCH_DURATION (s, default 15), BENCH_ROUNDS (default 3), BENCH_STREAMS (per
 * target, default 20), BENCH_GAP_MS (default 5). Needs Linux and `taskset`.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { Histogram } from 'hdr-histogram-js';
import { median } from './bench-report.js';
import { STREAM_BODY, STREAM_CHUNKS } from './chat-fixtures.js';
import { pause, PinnedProcesses, repin } from './pinned-processes.js';
import { sluiceEnv, sluiceMinConfig, sluiceYaml } from './proxy-configs.js';
import { freePort } from '../env/free-port.js';
import { createLatencyHistogram, percentileMs, recordMs } from '../drive/latency-histogram.js';

const duration = Number(process.env['BENCH_DURATION'] ?? 15);
const rounds = Number(process.env['BENCH_ROUNDS'] ?? 3);
const streams = Number(process.env['BENCH_STREAMS'] ?? 20);
const gapMs = Number(process.env['BENCH_GAP_MS'] ?? 5);
const TARGETS = ['direct', 'sluice'] as const;

/** What one target's streams saw in one phase. */
class Sample {
  readonly ttft: Histogram = createLatencyHistogram();
  readonly gaps: Histogram = createLatencyHistogram();
  streams = 0;
  errors = 0;

  /** p50, p99 and p99.9 of `h`, ms. */
  static tail(h: Histogram): [number, number, number] {
    return [percentileMs(h, 50) ?? NaN, percentileMs(h, 99) ?? NaN, percentileMs(h, 99.9) ?? NaN];
  }
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
        recordMs(last < 0 ? s.ttft : s.gaps, now - (last < 0 ? sent : last));
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

/** Runs `streams` loops of back-to-back streams on each agent at once for `seconds`. */
async function phase(
  targets: readonly { base: string; agent: http.Agent }[],
  seconds: number,
): Promise<Sample[]> {
  const end = performance.now() + seconds * 1000;
  // The loops start spread over one stream's length, as independent clients would, not all at once.
  const spreadMs = (STREAM_CHUNKS * gapMs) / streams;
  return Promise.all(
    targets.map(async ({ base, agent }) => {
      const s = new Sample();
      const loop = async (_: unknown, i: number): Promise<void> => {
        await pause(i * spreadMs);
        while (performance.now() < end) await oneStream(agent, base, s);
      };
      await Promise.all(Array.from({ length: streams }, loop));
      return s;
    }),
  );
}

const f2 = (n: number): string => n.toFixed(2);

interface Row {
  ttft: [number, number, number];
  gap: [number, number, number];
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-sse-'));
  const procs = new PinnedProcesses(dir);
  // Kept from the warm-up on: phases measure warm keep-alive connections.
  const agents = TARGETS.map(() => new http.Agent({ keepAlive: true, maxSockets: streams }));
  try {
    repin(process.pid, '0');
    const root = fileURLToPath(new URL('../../..', import.meta.url));
    const [nodePort, port, adminPort] = [await freePort(), await freePort(), await freePort()];
    const node = procs.start(
      'stand-in',
      '0',
      process.execPath,
      [
        join(root, 'dist', 'loadtest', 'bench', 'bench-child.js'),
        'stand-in',
        '--port',
        String(nodePort),
        '--chunk-gap-ms',
        String(gapMs),
      ],
      {},
    );
    await procs.waitForHttp(node, nodePort, 20_000);
    const config = join(dir, 'sluice.yaml');
    const upstream = `http://127.0.0.1:${nodePort}`;
    writeFileSync(config, sluiceYaml(sluiceMinConfig({ port, adminPort, upstream }), 'sluice-min'));
    const sluice = procs.start(
      'sluice',
      '1',
      process.execPath,
      [join(root, 'bin', 'sluice.js'), 'serve', '--no-watch', '--config', config],
      sluiceEnv(),
    );
    await procs.waitForHttp(sluice, port, 20_000);
    const targets = [upstream, `http://127.0.0.1:${port}`].map((base, i) => ({ base, agent: agents[i]! }));
    process.stdout.write(
      `SSE latency: ${rounds} rounds of ${duration} s, ${streams} streams at once to each target, both at the same time, ` +
        `${STREAM_CHUNKS} events ${gapMs} ms apart; Sluice pinned to CPU 1, the node and the client to CPU 0, node ${process.version}\n\n` +
        '| round | target | streams | errors | TTFT p50 | p99 | p99.9 | gap p50 | p99 | p99.9 |\n' +
        '| --: | --- | --: | --: | --: | --: | --: | --: | --: | --: |\n',
    );
    // Warm-up: JIT and connection pools settle before anything is measured.
    await phase(targets, Math.max(2, Math.round(duration / 4)));
    const rows: Row[][] = TARGETS.map(() => []);
    for (let r = 0; r < rounds; r++) {
      const samples = await phase(targets, duration);
      samples.forEach((s, k) => {
        const row = { ttft: Sample.tail(s.ttft), gap: Sample.tail(s.gaps) };
        rows[k]!.push(row);
        process.stdout.write(
          `| ${r + 1} | ${TARGETS[k]} | ${s.streams} | ${s.errors} | ${row.ttft.map(f2).join(' | ')} | ${row.gap.map(f2).join(' | ')} |\n`,
        );
      });
    }
    process.stdout.write(
      '\nmedian over rounds, ms:\n\n| target | TTFT p50 | p99 | p99.9 | gap p50 | p99 | p99.9 |\n| --- | --: | --: | --: | --: | --: | --: |\n',
    );
    TARGETS.forEach((t, k) => {
      const cols = [0, 1, 2].map((i) => median(rows[k]!.map((row) => row.ttft[i]!)));
      cols.push(...[0, 1, 2].map((i) => median(rows[k]!.map((row) => row.gap[i]!))));
      process.stdout.write(`| ${t} | ${cols.map(f2).join(' | ')} |\n`);
    });
    const [direct, viaSluice] = rows as [Row[], Row[]];
    const added = (pick: (row: Row) => number): string =>
      f2(median(viaSluice.map((row, i) => pick(row) - pick(direct[i]!))));
    process.stdout.write(
      `\nadded by Sluice at p99 (median over rounds of sluice − direct in the same round): ` +
        `time to first token ${added((row) => row.ttft[1])} ms, gap between events ${added((row) => row.gap[1])} ms\n`,
    );
  } finally {
    for (const a of agents) a.destroy();
    await procs.stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
