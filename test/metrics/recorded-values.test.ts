/**
 * The values Sluice records are the ones a client sees: a simulated node with a fixed delay shows
 * that delay as the p50 of its route × pool × node series in /admin/stats, and a stream's time to
 * first token in Sluice's histogram matches the one the client measured within 1 ms at p50. The
 * nodes run in a child process, so that their decode timers do not delay the client's clock.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { startFleet, type FleetHandle } from '../../loadtest/env/fleet-handle.js';
import { resolveSimProfile } from '../../loadtest/sim/profile-loader.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const DELAY_MS = 100;
const STREAM_STALL_MS = 20;

interface Summary {
  count: number;
  p50: number;
  p99: number;
}
interface Quantity {
  unit: string;
  window: Summary;
  total: Summary;
}
interface StatsBody {
  routes: ({ route: string } & Record<string, Quantity | string>)[];
  nodes: ({ pool: string; node: string } & Record<string, Quantity | string>)[];
  all: Record<string, Quantity>;
}

/** Sends a chat request; resolves with the client's time to the first `data:` event (stream) or the end, ms. */
function timedChat(
  url: string,
  stream: boolean,
  headers: Record<string, string>,
  maxTokens = 4,
): Promise<number> {
  const body = JSON.stringify({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: maxTokens,
    stream,
  });
  return new Promise((resolve, reject) => {
    const u = new URL('/v1/chat/completions', url);
    let t0 = 0;
    let first = -1;
    const req = request(
      u,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...headers,
        },
      },
      (res) => {
        res.on('data', (d: Buffer) => {
          if (first < 0 && stream && d.includes('data:')) first = performance.now() - t0;
        });
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
          else resolve(stream ? first : performance.now() - t0);
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    t0 = performance.now();
    req.end(body);
  });
}

/**
 * Streams over one kept-alive raw connection: the clock starts right before the request bytes are
 * written and stops when the first `data:` event arrives (no HTTP client work on either side).
 */
class RawStreamClient {
  private readonly socket: Socket;
  private buf = '';
  private waiter: (() => void) | null = null;

  private constructor(socket: Socket) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.buf += d.toString('latin1');
      this.waiter?.();
    });
  }

  static async open(url: string): Promise<RawStreamClient> {
    const u = new URL(url);
    const socket = connect(Number(u.port), u.hostname);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    return new RawStreamClient(socket);
  }

  /** Time to the first `data:` event, ms; resolves once the whole chunked response arrived. */
  async ttft(headers: Record<string, string>): Promise<number> {
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
      stream: true,
    });
    const head = [
      'POST /v1/chat/completions HTTP/1.1',
      'host: 127.0.0.1',
      'content-type: application/json',
      `content-length: ${Buffer.byteLength(body)}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ].join('\r\n');
    const bytes = Buffer.from(`${head}\r\n\r\n${body}`);
    this.buf = '';
    let first = -1;
    const t0 = performance.now();
    this.socket.write(bytes);
    await new Promise<void>((resolve) => {
      this.waiter = () => {
        if (first < 0 && this.buf.includes('data:')) first = performance.now() - t0;
        if (this.buf.includes('\r\n0\r\n\r\n')) {
          this.waiter = null;
          resolve();
        }
      };
    });
    return first;
  }

  close(): void {
    this.socket.destroy();
  }
}

function p50(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.ceil(s.length / 2) - 1]!;
}

describe('recorded values', { timeout: 60_000 }, () => {
  let fleet: FleetHandle | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startFleet({
      nodes: 2,
      profile: resolveSimProfile('fast'),
      speedFactors: [1, 1],
      process: 'child',
    });
    // One route per measuring round (selected by x-round), so that each round has its own series.
    const rounds = [0, 1, 2]
      .map((r) => `  - name: round-${r}\n    match: { headers: { x-round: '${r}' } }\n    pool: gpu\n`)
      .join('');
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}
routes:
${rounds}  - name: all
    match: {}
    pool: gpu
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('shows a node with a fixed delay at that delay at p50 in /admin/stats', async () => {
    const client: number[] = [];
    const direct: number[][] = [[], []];
    const stall = { 'x-sim-stall-ms': String(DELAY_MS) };
    for (let i = 0; i < 30; i++) {
      client.push(await timedChat(t!.url, false, stall, 1));
      // The node's own time for the same request, asked directly: what the node's delay really is
      // on this machine now (the simulator adds its prefill and a decode step, more when busy).
      direct[i % 2]!.push(await timedChat(fleet!.urls[i % 2]!, false, stall, 1));
    }
    const stats = (await (await fetch(`${t!.adminUrl}/admin/stats`)).json()) as StatsBody;
    const nodes = stats.nodes.filter((n) => n.node !== 'none');
    assert.equal(nodes.length, 2);
    const all = stats.all['duration']!.window;
    assert.ok(all.p50 <= p50(client) * 1.008, `Sluice p50 ${all.p50}, client p50 ${p50(client)}`);
    for (const n of nodes) {
      const d = n['duration'] as Quantity;
      const nodeMs = p50(direct[fleet!.urls.indexOf(n.node)]!);
      assert.equal(d.unit, 'ms');
      assert.equal(d.window.count, 15, `${n.node}: requests in the window`);
      // Within a few ms of the node's delay. (Above: never more than the client saw, since Sluice's
      // interval lies inside the client's; HDR reports a bucket's top, at most 0.8 % above.)
      assert.ok(
        d.window.p50 >= DELAY_MS && d.window.p50 <= Math.max(DELAY_MS, nodeMs) + 4,
        `${n.node}: p50 ${d.window.p50} ms for a ${DELAY_MS} ms node (answering in ${nodeMs.toFixed(3)} ms directly)`,
      );
      assert.equal(d.total.p50, d.window.p50);
      const ttfb = n['ttfb'] as Quantity;
      assert.ok(
        ttfb.window.p50 >= DELAY_MS && ttfb.window.p50 <= Math.max(DELAY_MS, nodeMs) + 4,
        `ttfb p50 ${ttfb.window.p50}`,
      );
    }
  });

  it("records a stream's time to first token as the client measured it, within 1 ms at p50", async () => {
    // Up to three rounds of 40 streams, each on its own route: a round on a machine busy enough to
    // deschedule this process between a write and its read is measured again.
    const rounds: string[] = [];
    let stats: StatsBody | undefined;
    for (let r = 0; r < 3; r++) {
      const raw = await RawStreamClient.open(t!.url);
      const client: number[] = [];
      try {
        for (let i = 0; i < 40; i++)
          client.push(await raw.ttft({ 'x-sim-stall-ms': String(STREAM_STALL_MS), 'x-round': String(r) }));
      } finally {
        raw.close();
      }
      stats = (await (await fetch(`${t!.adminUrl}/admin/stats`)).json()) as StatsBody;
      const ttft = stats.routes.find((x) => x.route === `round-${r}`)!['ttft'] as Quantity;
      assert.equal(ttft.total.count, 40);
      const clientP50 = p50(client);
      assert.ok(clientP50 >= STREAM_STALL_MS, `client p50 ${clientP50}`);
      rounds.push(`Sluice's TTFT p50 ${ttft.total.p50} ms, the client's ${clientP50.toFixed(3)} ms`);
      if (Math.abs(ttft.total.p50 - clientP50) <= 1) break;
    }
    const last = rounds.at(-1)!;
    const [, sluice, client] = /p50 ([\d.]+) ms, the client's ([\d.]+)/.exec(last)!;
    assert.ok(Math.abs(Number(sluice) - Number(client)) <= 1, rounds.join('; '));
    const gaps = stats!.all['itl']!;
    assert.ok(gaps.total.count > 0, 'inter-token gaps were recorded');
  });
});
