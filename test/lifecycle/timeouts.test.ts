/**
 * Integration tests of the upstream timeouts: time to first byte, idle gap between body chunks,
 * total exchange time and TCP connect, each against simulated nodes (or a listener whose accept
 * queue is full, for connect). Each test checks the reply shape and that it came well before the
 * node would have answered.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

interface OpenAiError {
  error: { message: string; type: string; param: unknown; code: string };
}

const json = { 'content-type': 'application/json' };

function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    model: 'sim-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 2,
    ...extra,
  });
}

/** Reads an SSE body to its end; returns the `data:` payloads and whether the body ended in error. */
async function readEvents(res: Response): Promise<{ events: string[]; failed: boolean }> {
  const events: string[] = [];
  let text = '';
  let failed = false;
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>)
      text += decoder.decode(chunk, { stream: true });
  } catch {
    failed = true;
  }
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).trim())
      .join('\n');
    if (data !== '') events.push(data);
  }
  return { events, failed };
}

function config(nodeUrl: string, timeouts: string, routeTimeouts = ''): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${nodeUrl}
    timeouts: ${timeouts}
routes:
  - name: all
    match: {}
    pool: gpu
${routeTimeouts === '' ? '' : `    timeouts: ${routeTimeouts}\n`}`;
}

describe('upstream timeouts', () => {
  let fleet: SimFleet;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });

  after(async () => {
    await fleet?.close();
  });

  describe('time to first byte', () => {
    let t: TestSluice;
    before(async () => {
      t = await startTestSluice(config(fleet.urls[0]!, '{ ttfb_ms: 300, idle_ms: 300, total_ms: 0 }'));
    });
    after(async () => {
      await t?.close();
    });

    it('answers 504 upstream_timeout soon after ttfb_ms when the node sends no head', async () => {
      const start = performance.now();
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-stall-ms': '3000' },
        body: chatBody(),
      });
      const elapsed = performance.now() - start;
      assert.equal(res.status, 504);
      const body = (await res.json()) as OpenAiError;
      assert.equal(body.error.code, 'upstream_timeout');
      assert.equal(body.error.type, 'server_error');
      assert.ok(res.headers.get('x-request-id'));
      assert.ok(elapsed >= 250, `answered after ${elapsed.toFixed(0)} ms, before the ttfb timeout`);
      assert.ok(elapsed < 1500, `answered after ${elapsed.toFixed(0)} ms; the stall lasts 3000 ms`);
      await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'inFlight back to 0');
    });

    it('does not time out a node that sends its head within ttfb_ms', async () => {
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-stall-ms': '50' },
        body: chatBody(),
      });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
    });

    it('ends a stream whose node goes quiet for longer than idle_ms with an SSE error event, then closes', async () => {
      const start = performance.now();
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-chunk-delay-ms': '3000' },
        body: chatBody({ stream: true, max_tokens: 3 }),
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
      const { events } = await readEvents(res);
      const elapsed = performance.now() - start;
      assert.ok(
        elapsed < 2000,
        `stream ended after ${elapsed.toFixed(0)} ms; the node's first token comes at 3000 ms`,
      );
      assert.ok(events.length >= 1, 'no event before the close');
      assert.ok(!events.includes('[DONE]'));
      const last = JSON.parse(events.at(-1)!) as OpenAiError;
      assert.equal(last.error.code, 'upstream_idle_timeout');
      assert.equal(last.error.type, 'server_error');
      await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'inFlight back to 0');
    });

    it('lets a stream run past idle_ms in total as long as no single gap exceeds it', async () => {
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-chunk-delay-ms': '100' },
        body: chatBody({ stream: true, max_tokens: 6 }),
      });
      const { events, failed } = await readEvents(res);
      assert.equal(failed, false);
      assert.equal(events.at(-1), '[DONE]');
      assert.ok(!events.some((e) => e.includes('"error"')));
    });
  });

  describe('total time', () => {
    let t: TestSluice;
    before(async () => {
      t = await startTestSluice(config(fleet.urls[0]!, '{ ttfb_ms: 10000, idle_ms: 10000, total_ms: 500 }'));
    });
    after(async () => {
      await t?.close();
    });

    it('answers 504 upstream_timeout after total_ms when no head came yet', async () => {
      const start = performance.now();
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-stall-ms': '3000' },
        body: chatBody(),
      });
      const elapsed = performance.now() - start;
      assert.equal(res.status, 504);
      const body = (await res.json()) as OpenAiError;
      assert.equal(body.error.code, 'upstream_timeout');
      assert.match(body.error.message, /500 ms/);
      assert.ok(elapsed >= 450 && elapsed < 2000, `answered after ${elapsed.toFixed(0)} ms`);
      await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'inFlight back to 0');
    });

    it('cuts a stream that outlives total_ms with an SSE error event', async () => {
      const start = performance.now();
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-chunk-delay-ms': '100' },
        body: chatBody({ stream: true, max_tokens: 40 }),
      });
      assert.equal(res.status, 200);
      const { events } = await readEvents(res);
      const elapsed = performance.now() - start;
      assert.ok(elapsed < 2500, `stream ran ${elapsed.toFixed(0)} ms; 40 tokens take 4000 ms`);
      assert.ok(events.length >= 2, `only ${events.length} events`);
      assert.ok(!events.includes('[DONE]'));
      const last = JSON.parse(events.at(-1)!) as OpenAiError;
      assert.equal(last.error.code, 'upstream_timeout');
      await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'inFlight back to 0');
    });
  });

  describe('per-route override', () => {
    let t: TestSluice;
    before(async () => {
      t = await startTestSluice(config(fleet.urls[0]!, '{ ttfb_ms: 10000 }', '{ ttfb_ms: 300 }'));
    });
    after(async () => {
      await t?.close();
    });

    it("applies the route's ttfb_ms over the pool's", async () => {
      const start = performance.now();
      const res = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, 'x-sim-stall-ms': '3000' },
        body: chatBody(),
      });
      const elapsed = performance.now() - start;
      assert.equal(res.status, 504);
      await res.arrayBuffer();
      assert.ok(elapsed < 1500, `answered after ${elapsed.toFixed(0)} ms`);
    });
  });
});

/**
 * A loopback listener that never accepts: it lives in a worker thread blocked in Atomics.wait, so
 * once its small accept queue is full the kernel drops new SYNs and connects hang until they time out.
 */
class BlackholeListener {
  port = 0;
  private readonly worker: Worker;
  /** Set to 1 (and notified) to release the blocked worker. */
  private readonly flag: Int32Array;
  private readonly fillers: Socket[] = [];

  private constructor(worker: Worker, flag: Int32Array) {
    this.worker = worker;
    this.flag = flag;
  }

  static async start(): Promise<BlackholeListener> {
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const server = require('node:net').createServer();
       server.listen({ host: '127.0.0.1', port: 0, backlog: 1 }, () => {
         parentPort.postMessage(server.address().port);
         Atomics.wait(workerData, 0, 0);
         server.close();
       });`,
      { eval: true, workerData: flag },
    );
    const b = new BlackholeListener(worker, flag);
    b.port = await new Promise<number>((resolve, reject) => {
      worker.once('message', (port: number) => resolve(port));
      worker.once('error', reject);
    });
    await b.fill();
    return b;
  }

  /** Opens connections until one does not complete within 300 ms: the accept queue is then full. */
  private async fill(): Promise<void> {
    for (let i = 0; i < 16; i++) {
      const s = connect({ host: '127.0.0.1', port: this.port });
      s.on('error', () => undefined);
      this.fillers.push(s);
      const connected = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 300);
        s.once('connect', () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
      if (!connected) return;
    }
    throw new Error('the accept queue never filled up');
  }

  async close(): Promise<void> {
    for (const s of this.fillers) s.destroy();
    Atomics.store(this.flag, 0, 1);
    Atomics.notify(this.flag, 0);
    await this.worker.terminate();
  }
}

/**
 * A node that streams `events` SSE events of about 1 KiB as fast as the connection takes them, then
 * `[DONE]`: enough bytes to fill the socket buffers of a client that stops reading.
 */
async function startFloodNode(events: number): Promise<{ url: string; close(): Promise<void> }> {
  const line = `data: ${JSON.stringify({ choices: [{ delta: { content: 'x'.repeat(1000) } }] })}\n\n`;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let sent = 0;
      const pump = (): void => {
        while (sent < events) {
          sent++;
          if (!res.write(line)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end('data: [DONE]\n\n');
      };
      pump();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe('body gap while the client is not reading', { timeout: 30_000 }, () => {
  let node: Awaited<ReturnType<typeof startFloodNode>> | undefined;
  let t: TestSluice | undefined;
  const EVENTS = 40_000; // about 42 MB: more than the loopback socket buffers hold

  before(async () => {
    node = await startFloodNode(EVENTS);
    t = await startTestSluice(config(node.url, '{ ttfb_ms: 2000, idle_ms: 300, total_ms: 0 }'));
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  it('does not cut a stream while the client reads nothing for longer than idle_ms', async () => {
    const { port } = new URL(t!.url);
    const body = chatBody({ stream: true });
    const sock: Socket = connect(Number(port), '127.0.0.1');
    await new Promise<void>((r, j) => sock.once('connect', r).once('error', j));
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
    let bytes = 0;
    let tail = '';
    const ended = new Promise<void>((r) => sock.on('end', r).on('close', r));
    sock.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      tail = (tail + chunk.toString('latin1')).slice(-64);
    });
    // Read the head and a little, then stop reading for five idle timeouts: Sluice's writes back
    // up, it stops reading from the node, and the node goes quiet: the gap is the client's.
    await waitFor(() => bytes > 0, 5000, 'the head');
    sock.pause();
    await new Promise((r) => setTimeout(r, 1500));
    const whilePaused = t!.sluice.stats.inFlight;
    sock.resume();
    await ended;
    assert.equal(whilePaused, 1, 'the request was still in flight after the pause');
    assert.ok(bytes > EVENTS * 1000, `only ${bytes} bytes arrived`);
    assert.match(
      tail,
      /data: \[DONE\]\n\n(\r\n0\r\n\r\n)?$/,
      `the stream ended with ${JSON.stringify(tail)}`,
    );
    assert.doesNotMatch(tail, /upstream_idle_timeout/);
  });
});

/** The `late` pool's connect timeout: far beyond its ttfb_ms, so the connection is still pending then. */
const LATE_CONNECT_MS = 1500;

describe('connect timeout', () => {
  let fleet: SimFleet;
  let hole: BlackholeListener;
  let t: TestSluice;
  let blackhole: string;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    hole = await BlackholeListener.start();
    blackhole = `http://127.0.0.1:${hole.port}`;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: hole
    nodes:
      - url: ${blackhole}
    timeouts: { connect_ms: 300 }
  - name: mixed
    nodes:
      - url: ${blackhole}
      - url: ${fleet.urls[0]}
    timeouts: { connect_ms: 300 }
  - name: late
    nodes:
      - url: ${blackhole}
    timeouts: { connect_ms: ${LATE_CONNECT_MS}, ttfb_ms: 300 }
routes:
  - name: hole
    match: { headers: { x-pool: hole } }
    pool: hole
  - name: late-batched
    match: { path: /v1/embeddings, headers: { x-pool: late } }
    pool: late
    batching: { mode: native, max_batch_size: 4, max_wait_ms: 2, max_attempts: 1 }
  - name: late
    match: { headers: { x-pool: late } }
    pool: late
  - name: mixed
    match: {}
    pool: mixed
`);
  });

  after(async () => {
    await t?.close();
    await hole?.close();
    await fleet?.close();
  });

  it('answers 504 upstream_connect_timeout soon after connect_ms when the node never accepts', async () => {
    const start = performance.now();
    const res = await fetch(`${t.url}/v1/models`, { headers: { 'x-pool': 'hole' } });
    const elapsed = performance.now() - start;
    assert.equal(res.status, 504);
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'upstream_connect_timeout');
    assert.ok(elapsed >= 250 && elapsed < 1500, `answered after ${elapsed.toFixed(0)} ms`);
  });

  it('answers at ttfb_ms when the connection is still being made then, and counts the failure once', async () => {
    const node = (): UpstreamNode => t.sluice.current.pools.get('late')!.members[0]!.node;
    const failures = node().failures;
    const start = performance.now();
    const res = await fetch(`${t.url}/v1/models`, { headers: { 'x-pool': 'late' } });
    const elapsed = performance.now() - start;
    assert.equal(res.status, 504);
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'upstream_timeout');
    assert.ok(
      elapsed >= 250 && elapsed < LATE_CONNECT_MS - 300,
      `answered after ${elapsed.toFixed(0)} ms (ttfb_ms 300, connect_ms ${LATE_CONNECT_MS})`,
    );
    assert.equal(t.sluice.stats.inFlight, 0);
    // undici still holds the request until its own connect timeout: the node stays counted busy
    // until then, and that end is not a second failure.
    assert.equal(node().inFlight, 1);
    await waitFor(() => node().inFlight === 0, LATE_CONNECT_MS + 5000, 'undici to let go of the request');
    assert.equal(node().failures - failures, 1);
  });

  it('answers a micro-batched request at ttfb_ms when the connection is still being made then', async () => {
    const node = (): UpstreamNode => t.sluice.current.pools.get('late')!.members[0]!.node;
    await waitFor(() => node().inFlight === 0, LATE_CONNECT_MS + 5000, 'the previous test to let go');
    const failures = node().failures;
    const start = performance.now();
    const res = await fetch(`${t.url}/v1/embeddings`, {
      method: 'POST',
      headers: { ...json, 'x-pool': 'late' },
      body: JSON.stringify({ model: 'sim-embed', input: 'hi' }),
    });
    const elapsed = performance.now() - start;
    const text = await res.text();
    assert.equal(res.status, 504, text);
    assert.equal((JSON.parse(text) as OpenAiError).error.code, 'upstream_timeout');
    assert.ok(
      elapsed >= 250 && elapsed < LATE_CONNECT_MS - 300,
      `answered after ${elapsed.toFixed(0)} ms (ttfb_ms 300, connect_ms ${LATE_CONNECT_MS})`,
    );
    // As for a streamed attempt: the node stays counted busy while undici holds the call, and
    // undici's later end is not a second failure.
    await waitFor(() => node().inFlight === 0, LATE_CONNECT_MS + 5000, 'undici to let go of the call');
    assert.equal(node().failures - failures, 1);
  });

  it('retries on another node when the first one times out connecting', async () => {
    const before = fleet.nodes[0]!.stats().served;
    const body = JSON.stringify({ model: 'sim-chat', prompt: 'hi', max_tokens: 1 });
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${t.url}/v1/completions`, { method: 'POST', headers: json, body });
      assert.equal(res.status, 200, await res.text());
    }
    assert.equal(fleet.nodes[0]!.stats().served - before, 2);
  });
});
