/**
 * Integration tests of forwarding through a real Sluice to simulated GPU nodes: which headers cross
 * the proxy, request ids, byte-exact bodies, routing, streaming without buffering, upstream
 * failures (drop, error status, dead nodes), weighted balancing and client aborts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import type { SimNode } from '../../loadtest/sim/sim-node.js';
import { RawConnection, rawRequest } from '../helpers/raw-http.js';
import { refusedPort } from '../helpers/refused-port.js';
import {
  LOOPBACK_HEAD,
  basicConfig,
  findNode,
  startTestSluice,
  waitFor,
  type TestSluice,
} from '../helpers/sluice.js';

/** What `/debug/echo` on a simulated node returns. */
interface Echo {
  method: string;
  url: string;
  headers: [string, string][];
  body_length: number;
  body_sha256: string;
}

interface OpenAiError {
  error: { message: string; type: string; param: unknown; code: string };
}

/** Every value the node saw for header `name` (case-insensitive). */
function echoed(echo: Echo, name: string): string[] {
  return echo.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v);
}

async function echo(url: string, init: RequestInit = {}): Promise<{ res: Response; echo: Echo }> {
  const res = await fetch(`${url}/debug/echo`, init);
  assert.equal(res.status, 200);
  return { res, echo: (await res.json()) as Echo };
}

function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    model: 'sim-chat',
    messages: [{ role: 'user', content: 'hello there' }],
    max_tokens: 2,
    ...extra,
  });
}

/** One SSE event and when it was complete, ms after the request was sent. */
interface TimedEvent {
  data: string;
  atMs: number;
}

/** Reads an SSE body to its end, timestamping each event. `closedAtMs` is when the body ended. */
async function readSse(
  res: Response,
  startMs: number,
): Promise<{ events: TimedEvent[]; closedAtMs: number; failed: boolean }> {
  const events: TimedEvent[] = [];
  const decoder = new TextDecoder();
  let text = '';
  let failed = false;
  try {
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const block = text.slice(0, end);
        text = text.slice(end + 2);
        const data = block
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trim())
          .join('\n');
        if (data !== '') events.push({ data, atMs: performance.now() - startMs });
      }
    }
  } catch {
    failed = true;
  }
  return { events, closedAtMs: performance.now() - startMs, failed };
}

/** A loopback port with nothing listening on it. */
/** Sluice's own UpstreamNode for `url`. */
function proxyNode(t: TestSluice, url: string): { inFlight: number; attempts: number; failures: number } {
  const n = findNode(t, url);
  if (n === undefined) throw new Error(`Sluice has no node ${url}`);
  return n;
}

function servedCounts(nodes: readonly SimNode[]): number[] {
  return nodes.map((n) => n.stats().served);
}

describe('forwarding through one pool', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig(fleet.urls));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('drops hop-by-hop headers, and headers named in Connection, but forwards end-to-end headers', async () => {
    const request = [
      'GET /debug/echo HTTP/1.1',
      'Host: sluice.test',
      'Connection: X-Foo, keep-alive',
      'Keep-Alive: timeout=99',
      'TE: trailers',
      'Upgrade: h2c',
      'Proxy-Connection: keep-alive',
      'X-Foo: hop-secret',
      'X-End-To-End: kept',
      'Authorization: Bearer sk-test',
      'Accept: application/json',
      'User-Agent: framing-test/1',
      '',
      '',
    ].join('\r\n');
    const { response, conn } = await rawRequest(t.url, request);
    conn.destroy();
    assert.equal(response.status, 200);
    const e = JSON.parse(response.body.toString('utf8')) as Echo;
    assert.deepEqual(echoed(e, 'x-foo'), [], 'a header named in Connection was forwarded');
    assert.deepEqual(echoed(e, 'keep-alive'), []);
    assert.deepEqual(echoed(e, 'te'), []);
    assert.deepEqual(echoed(e, 'upgrade'), []);
    assert.deepEqual(echoed(e, 'proxy-connection'), []);
    // The upstream client manages its own connection; the client's Connection value must not leak.
    for (const v of echoed(e, 'connection')) assert.doesNotMatch(v, /x-foo/i);
    assert.deepEqual(echoed(e, 'x-end-to-end'), ['kept']);
    assert.deepEqual(echoed(e, 'authorization'), ['Bearer sk-test']);
    assert.deepEqual(echoed(e, 'accept'), ['application/json']);
    assert.deepEqual(echoed(e, 'user-agent'), ['framing-test/1']);
  });

  it('keeps every value of a repeated end-to-end header', async () => {
    const { response, conn } = await rawRequest(
      t.url,
      'GET /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nX-Multi: one\r\nX-Multi: two\r\n\r\n',
    );
    conn.destroy();
    const e = JSON.parse(response.body.toString('utf8')) as Echo;
    assert.deepEqual(echoed(e, 'x-multi').join(',').split(/,\s*/), ['one', 'two']);
  });

  it('sets x-forwarded-for to the client address when the client sent none', async () => {
    const { echo: e } = await echo(t.url);
    assert.deepEqual(echoed(e, 'x-forwarded-for'), ['127.0.0.1']);
  });

  it('appends the client address to a client-provided x-forwarded-for', async () => {
    const { echo: e } = await echo(t.url, { headers: { 'x-forwarded-for': '203.0.113.7, 198.51.100.2' } });
    assert.deepEqual(echoed(e, 'x-forwarded-for'), ['203.0.113.7, 198.51.100.2, 127.0.0.1']);
  });

  it('generates an x-request-id when the client sent none, returns it, and sends the same one upstream', async () => {
    const { res, echo: e } = await echo(t.url);
    const id = res.headers.get('x-request-id');
    assert.ok(id !== null && id.length > 0, 'no x-request-id in the response');
    assert.deepEqual(echoed(e, 'x-request-id'), [id]);
    const second = await echo(t.url);
    assert.notEqual(second.res.headers.get('x-request-id'), id, 'two requests got the same id');
  });

  it('keeps a valid client x-request-id end to end', async () => {
    const { res, echo: e } = await echo(t.url, { headers: { 'x-request-id': 'client-req.42:abc' } });
    assert.equal(res.headers.get('x-request-id'), 'client-req.42:abc');
    assert.deepEqual(echoed(e, 'x-request-id'), ['client-req.42:abc']);
  });

  it('replaces an invalid client x-request-id with a generated one', async () => {
    const bad = 'x'.repeat(300);
    const { res, echo: e } = await echo(t.url, { headers: { 'x-request-id': bad } });
    const id = res.headers.get('x-request-id');
    assert.ok(id !== null && id !== bad);
    assert.deepEqual(echoed(e, 'x-request-id'), [id]);
  });

  it('forwards a 1 MB binary request body byte for byte', async () => {
    const body = randomBytes(1024 * 1024);
    const { echo: e } = await echo(t.url, {
      method: 'POST',
      headers: { 'content-type': 'application/octet-stream' },
      body,
    });
    assert.equal(e.method, 'POST');
    assert.equal(e.body_length, body.length);
    assert.equal(e.body_sha256, createHash('sha256').update(body).digest('hex'));
  });

  it('forwards the method, path and query string unchanged', async () => {
    const res = await fetch(`${t.url}/debug/echo?a=1&b=two%20words&c=&a=3`, { method: 'PUT', body: 'x' });
    const e = (await res.json()) as Echo;
    assert.equal(e.method, 'PUT');
    assert.equal(e.url, '/debug/echo?a=1&b=two%20words&c=&a=3');
  });

  it('forwards a path without a query string exactly, with no question mark added', async () => {
    const res = await fetch(`${t.url}/debug/echo`);
    const e = (await res.json()) as Echo;
    assert.equal(e.url, '/debug/echo');
  });

  it('answers 400 to a request that cannot be forwarded, without counting it against the node', async () => {
    const node = proxyNode(t, fleet.urls[0]!);
    const failures = node.failures;
    const { response, conn } = await rawRequest(
      t.url,
      'GET /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nX-Odd: a\x7fb\r\n\r\n',
    );
    conn.destroy();
    assert.equal(response.status, 400);
    assert.equal((JSON.parse(response.body.toString('utf8')) as OpenAiError).error.code, 'invalid_request');
    assert.equal(node.failures, failures);
  });

  it('streams SSE events as they arrive instead of buffering the response', async () => {
    const start = performance.now();
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '100' },
      body: chatBody({ stream: true, max_tokens: 8 }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const { events, closedAtMs } = await readSse(res, start);
    assert.equal(events.at(-1)?.data, '[DONE]');
    assert.ok(events.length >= 9, `only ${events.length} events`);
    const first = events[0]!.atMs;
    // 8 tokens 100 ms apart: the stream lasts ~800 ms; a buffered one delivers everything at the end.
    assert.ok(closedAtMs >= 600, `stream ended after ${closedAtMs.toFixed(0)} ms`);
    assert.ok(
      closedAtMs - first >= 500,
      `first event at ${first.toFixed(0)} ms, end at ${closedAtMs.toFixed(0)} ms`,
    );
    // Tokens are 100 ms apart; allow a couple of gaps squeezed by a busy event loop, not a burst.
    const gaps = events.slice(1, 8).map((ev, i) => ev.atMs - events[i]!.atMs);
    assert.ok(
      gaps.filter((g) => g >= 40).length >= 5,
      `events arrived in bursts: gaps ${gaps.map((g) => g.toFixed(0)).join(', ')} ms`,
    );
  });

  it('ends a stream whose node drops mid-way with an SSE error event before the close', async () => {
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-drop-after': '2' },
      body: chatBody({ stream: true, max_tokens: 8 }),
    });
    assert.equal(res.status, 200);
    const { events } = await readSse(res, performance.now());
    assert.equal(events.length, 3, events.map((e) => e.data).join(' | '));
    assert.ok(
      events.every((e) => e.data !== '[DONE]'),
      'a dropped stream ended with [DONE]',
    );
    const last = JSON.parse(events[2]!.data) as OpenAiError;
    assert.equal(last.error.type, 'server_error');
    assert.equal(last.error.code, 'upstream_connection_reset');
    assert.equal(typeof last.error.message, 'string');
    await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'inFlight back to 0');
  });

  it('passes an upstream error status through unchanged, with its retry-after and body, without retrying', async () => {
    const before = fleet.nodes[0]!.stats().injectedErrors;
    const res = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-status': '503', 'x-sim-retry-after': '7' },
      body: chatBody(),
    });
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '7');
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'sim_injected_error');
    assert.equal(fleet.nodes[0]!.stats().injectedErrors - before, 1, 'the 503 was retried');
  });

  it('aborts the upstream request when the client disconnects mid-stream', async () => {
    const node = fleet.nodes[0]!;
    const abortsBefore = node.stats().clientAborts;
    const conn = await RawConnection.open(t.url);
    const body = chatBody({ stream: true, max_tokens: 200 });
    await conn.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nx-sim-chunk-delay-ms: 50\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await conn.waitForText('data: ', 5000);
    assert.equal(node.stats().running, 1);
    assert.equal(t.sluice.stats.inFlight, 1);
    conn.destroy();
    await waitFor(() => node.stats().running === 0, 3000, 'the node to stop generating');
    await waitFor(() => t.sluice.stats.inFlight === 0, 3000, 'Sluice inFlight back to 0');
    assert.equal(node.stats().clientAborts - abortsBefore, 1);
    assert.equal(proxyNode(t, fleet.urls[0]!).inFlight, 0);
  });

  it('does not count a client abort as a failure of the node', async () => {
    const node = fleet.nodes[0]!;
    const failuresBefore = proxyNode(t, fleet.urls[0]!).failures;
    const conn = await RawConnection.open(t.url);
    const body = chatBody({ stream: true, max_tokens: 200 });
    await conn.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nx-sim-chunk-delay-ms: 50\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await conn.waitForText('data: ', 5000);
    conn.destroy();
    await waitFor(
      () => node.stats().running === 0 && t.sluice.stats.inFlight === 0,
      3000,
      'the abort to settle',
    );
    assert.equal(
      proxyNode(t, fleet.urls[0]!).failures,
      failuresBefore,
      'a client abort was counted as a node failure',
    );
  });

  it('records a client that leaves before the response head as 499, not as an upstream error', async () => {
    const stats = t.sluice.stats.routes.get('all')!;
    const count = (status: number): number => stats.byStatus.get(status) ?? 0;
    const before = {
      aborted: stats.aborted,
      s499: count(499),
      s502: count(502),
      failures: proxyNode(t, fleet.urls[0]!).failures,
    };
    const conn = await RawConnection.open(t.url);
    const body = chatBody();
    await conn.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nx-sim-stall-ms: 2000\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await waitFor(() => proxyNode(t, fleet.urls[0]!).inFlight === 1, 2000, 'the request to reach the node');
    conn.destroy();
    await waitFor(() => t.sluice.stats.inFlight === 0, 2000, 'Sluice inFlight back to 0');
    assert.equal(stats.aborted - before.aborted, 1);
    assert.deepEqual(
      {
        s499: count(499) - before.s499,
        s502: count(502) - before.s502,
        failures: proxyNode(t, fleet.urls[0]!).failures - before.failures,
      },
      { s499: 1, s502: 0, failures: 0 },
    );
  });
});

describe('routing', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: a
    nodes:
      - url: ${fleet.urls[0]}
  - name: b
    nodes:
      - url: ${fleet.urls[1]}
routes:
  - name: by-header
    match: { headers: { x-pool: b } }
    pool: b
  - name: by-host
    match: { host: b.example }
    pool: b
  - name: by-model
    match: { models: [model-b] }
    pool: b
  - name: models-on-v3
    match: { path_prefix: /v3/, models: [model-c] }
    pool: b
  - name: by-path
    match: { path: /v1/embeddings }
    pool: b
  - name: by-prefix
    match: { path_prefix: /v1/comp }
    pool: b
  - name: chat-post
    match: { path_prefix: /v1/chat/, methods: [POST] }
    pool: a
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  /** Sends the request and returns which pool's node served it ('a' or 'b'), asserting exactly one did. */
  async function servedBy(path: string, init: RequestInit): Promise<'a' | 'b'> {
    const before = servedCounts(fleet.nodes);
    const res = await fetch(`${t.url}${path}`, { method: 'POST', ...init });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const after = servedCounts(fleet.nodes);
    const deltas = after.map((v, i) => v - before[i]!);
    assert.equal(deltas[0]! + deltas[1]!, 1, `served deltas ${deltas.join(',')}`);
    return deltas[0] === 1 ? 'a' : 'b';
  }

  const json = { 'content-type': 'application/json' };

  it('sends a request that matches only the catch-all chat route to pool a', async () => {
    assert.equal(await servedBy('/v1/chat/completions', { headers: json, body: chatBody() }), 'a');
  });

  it('routes on a header value', async () => {
    assert.equal(
      await servedBy('/v1/chat/completions', { headers: { ...json, 'x-pool': 'b' }, body: chatBody() }),
      'b',
    );
    assert.equal(
      await servedBy('/v1/chat/completions', { headers: { ...json, 'x-pool': 'B' }, body: chatBody() }),
      'a',
    );
  });

  it('routes on the Host header, case-insensitive and without its port', async () => {
    const body = chatBody();
    const request = `POST /v1/chat/completions HTTP/1.1\r\nHost: B.Example:8080\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const before = servedCounts(fleet.nodes);
    const { response, conn } = await rawRequest(t.url, request);
    conn.destroy();
    assert.equal(response.status, 200, response.body.toString());
    const after = servedCounts(fleet.nodes);
    assert.deepEqual([after[0]! - before[0]!, after[1]! - before[1]!], [0, 1]);
  });

  it("routes on the JSON body's model field", async () => {
    assert.equal(
      await servedBy('/v1/chat/completions', { headers: json, body: chatBody({ model: 'model-b' }) }),
      'b',
    );
    assert.equal(
      await servedBy('/v1/chat/completions', { headers: json, body: chatBody({ model: 'model-c' }) }),
      'a',
    );
  });

  it('routes on an exact path', async () => {
    const body = JSON.stringify({ model: 'sim-embed', input: ['one', 'two'] });
    assert.equal(await servedBy('/v1/embeddings', { headers: json, body }), 'b');
  });

  it('routes on a path prefix', async () => {
    const body = JSON.stringify({ model: 'sim-chat', prompt: 'hello', max_tokens: 1 });
    assert.equal(await servedBy('/v1/completions', { headers: json, body }), 'b');
  });

  it('routes on the method: a GET matching no route gets 404 route_not_found', async () => {
    const res = await fetch(`${t.url}/v1/chat/completions`);
    assert.equal(res.status, 404);
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'route_not_found');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.param, null);
    assert.match(body.error.message, /GET \/v1\/chat\/completions/);
  });

  it("answers a model no route on the path serves with OpenAI's 404 model_not_found, and forwards nothing", async () => {
    const before = servedCounts(fleet.nodes);
    const res = await fetch(`${t.url}/v3/chat`, { method: 'POST', headers: json, body: chatBody() });
    assert.equal(res.status, 404);
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'model_not_found');
    assert.match(body.error.message, /The model `\S+` does not exist/);
    assert.deepEqual(servedCounts(fleet.nodes), before);
  });

  it('answers a request that matches no route with 404 and an OpenAI error body, and forwards nothing', async () => {
    const before = servedCounts(fleet.nodes);
    const res = await fetch(`${t.url}/v2/unknown?x=1`, { method: 'POST', headers: json, body: chatBody() });
    assert.equal(res.status, 404);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    assert.ok(res.headers.get('x-request-id'));
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'route_not_found');
    assert.deepEqual(servedCounts(fleet.nodes), before);
  });
});

describe('weighted round-robin over a fleet', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 3, port: 0, profile: 'fast' });
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]}
        weight: 1
      - url: ${fleet.urls[1]}
        weight: 1
      - url: ${fleet.urls[2]}
        weight: 2
routes:
  - name: all
    match: {}
    pool: gpu
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('spreads 400 requests over weights 1, 1, 2 as exactly 100, 100, 200', async () => {
    const before = servedCounts(fleet.nodes);
    const body = JSON.stringify({ model: 'sim-chat', prompt: 'hi', max_tokens: 1 });
    let next = 0;
    const statuses: number[] = [];
    const worker = async (): Promise<void> => {
      while (next < 400) {
        next++;
        const res = await fetch(`${t.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        });
        await res.arrayBuffer();
        statuses.push(res.status);
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    assert.equal(statuses.length, 400);
    assert.ok(
      statuses.every((s) => s === 200),
      `non-200: ${statuses.filter((s) => s !== 200).join(',')}`,
    );
    const after = servedCounts(fleet.nodes);
    assert.deepEqual(
      after.map((v, i) => v - before[i]!),
      [100, 100, 200],
    );
  });
});

describe('dead nodes', () => {
  let fleet: SimFleet;
  let t: TestSluice;
  let dead: string;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    dead = `http://127.0.0.1:${await refusedPort()}`;
    t = await startTestSluice(`${LOOPBACK_HEAD}pools:
  - name: half-dead
    nodes:
      - url: ${dead}
      - url: ${fleet.urls[0]}
  - name: all-dead
    nodes:
      - url: ${dead}
    connections_per_node: 4
routes:
  - name: dead
    match: { headers: { x-pool: dead } }
    pool: all-dead
  - name: rest
    match: {}
    pool: half-dead
`);
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('retries a request on another node when its node refuses the connection', async () => {
    const before = fleet.nodes[0]!.stats().served;
    const body = JSON.stringify({ model: 'sim-chat', prompt: 'hi', max_tokens: 1 });
    for (let i = 0; i < 10; i++) {
      const res = await fetch(`${t.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      assert.equal(res.status, 200, await res.text());
    }
    assert.equal(fleet.nodes[0]!.stats().served - before, 10);
    const deadNode = [...t.sluice.registry.all()].find(
      (n) => n.origin === new URL(dead).origin && n.options.connections !== 4,
    );
    assert.ok(deadNode !== undefined);
    assert.ok(deadNode.attempts >= 4, `the dead node was tried ${deadNode.attempts} times`);
    assert.equal(deadNode.failures, deadNode.attempts);
    assert.equal(t.sluice.stats.inFlight, 0);
  });

  it('answers 502 upstream_connect_error when the only node of the pool is dead', async () => {
    const res = await fetch(`${t.url}/v1/models`, { headers: { 'x-pool': 'dead' } });
    assert.equal(res.status, 502);
    const body = (await res.json()) as OpenAiError;
    assert.equal(body.error.code, 'upstream_connect_error');
    assert.equal(body.error.type, 'server_error');
    assert.ok(res.headers.get('x-request-id'));
    assert.equal(t.sluice.stats.inFlight, 0);
  });
});
