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
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

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
    t = await startTestSluice(basicConfig(fleet.urls));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('shows a node with a fixed delay at that delay at p50 in /admin/stats', async () => {
    const client: number[] = [];
    for (let i = 0; i < 30; i++)
      client.push(await timedChat(t!.url, false, { 'x-sim-stall-ms': String(DELAY_MS) }, 1));
    const stats = (await (await fetch(`${t!.adminUrl}/admin/stats`)).json()) as StatsBody;
    const nodes = stats.nodes.filter((n) => n.node !== 'none');
    assert.equal(nodes.length, 2);
    for (const n of nodes) {
      const d = n['duration'] as Quantity;
      assert.equal(d.unit, 'ms');
      assert.ok(d.window.count >= 10, `${n.node}: ${d.window.count} requests in the window`);
      // Within a few ms of the node's delay (the simulator adds its prefill and one decode step),
      // and never more than the client saw: Sluice's interval lies inside the client's.
      assert.ok(
        d.window.p50 >= DELAY_MS && d.window.p50 <= DELAY_MS + 10,
        `${n.node}: p50 ${d.window.p50} ms for a ${DELAY_MS} ms node`,
      );
      assert.ok(d.window.p50 <= p50(client) * 1.008, `Sluice p50 ${d.window.p50}, client p50 ${p50(client)}`);
      assert.equal(d.total.p50, d.window.p50);
      const ttfb = n['ttfb'] as Quantity;
      assert.ok(
        ttfb.window.p50 >= DELAY_MS && ttfb.window.p50 <= DELAY_MS + 8,
        `ttfb p50 ${ttfb.window.p50}`,
      );
    }
  });

  it("records a stream's time to first token as the client measured it, within 1 ms at p50", async () => {
    const client: number[] = [];
    for (let i = 0; i < 60; i++)
      client.push(await timedChat(t!.url, true, { 'x-sim-stall-ms': String(STREAM_STALL_MS) }));
    const stats = (await (await fetch(`${t!.adminUrl}/admin/stats`)).json()) as StatsBody;
    const ttft = stats.all['ttft']!;
    assert.equal(ttft.total.count, 60);
    const clientP50 = p50(client);
    assert.ok(clientP50 >= STREAM_STALL_MS, `client p50 ${clientP50}`);
    assert.ok(
      Math.abs(ttft.total.p50 - clientP50) <= 1,
      `Sluice's TTFT p50 ${ttft.total.p50} ms, the client's ${clientP50.toFixed(3)} ms`,
    );
    const gaps = stats.all['itl']!;
    assert.ok(gaps.total.count > 0, 'inter-token gaps were recorded');
  });
});
