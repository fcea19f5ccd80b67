/**
 * Tracing: an incoming W3C traceparent is continued and each attempt forwards its own span id; a
 * request without one starts a trace; an unsampled one is passed on untouched; spans (request,
 * attempts) reach a real OTLP/HTTP collector on loopback as JSON. Exactly one traceparent goes to a
 * node: two from the client are invalid and start a new trace; a tracestate goes on only with the
 * trace it belongs to (dropped beside a new trace, sampled or not). With tracing off, traceparent is
 * forwarded as the client sent it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rawRequest } from '../helpers/raw-http.js';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: { key: string; value: { stringValue?: string; intValue?: string } }[];
  status: { code: number };
}
interface OtlpBody {
  resourceSpans: {
    resource: { attributes: { key: string; value: { stringValue: string } }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function closeServer(server: Server | undefined): Promise<void> {
  if (server === undefined) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

function body(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let b = '';
    req.on('data', (d: Buffer) => (b += d.toString()));
    req.on('end', () => resolve(b));
  });
}

/** The trace-context headers a node received, every line of each (from the raw head). */
interface Received {
  traceparent: string[];
  tracestate: string[];
}

function received(req: IncomingMessage): Received {
  const r: Received = { traceparent: [], tracestate: [] };
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.toLowerCase();
    if (name === 'traceparent' || name === 'tracestate') r[name].push(req.rawHeaders[i + 1]!);
  }
  return r;
}

/**
 * Sends a chat completion with `lines` as extra header lines, each on its own line (a repeated
 * header stays repeated, which fetch would join); resolves with the status.
 */
async function sendWith(url: string, lines: [string, string][]): Promise<number> {
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  const head = [
    'POST /v1/chat/completions HTTP/1.1',
    'host: sluice.test',
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(body)}`,
    ...lines.map(([n, v]) => `${n}: ${v}`),
  ];
  const { response, conn } = await rawRequest(url, `${head.join('\r\n')}\r\n\r\n${body}`);
  conn.destroy();
  return response.status;
}

function attr(s: OtlpSpan, key: string): string | undefined {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v?.stringValue ?? v?.intValue;
}

describe('tracing', { timeout: 30_000 }, () => {
  /** traceparent values the nodes received, by node index. */
  const seen: (string | undefined)[][] = [[], []];
  /** Trace-context headers every attempt carried, whichever node it reached, in arrival order. */
  const contexts: Received[] = [];
  const exports: OtlpBody[] = [];
  let nodes: Server[] = [];
  let collector: Server | undefined;
  let t: TestSluice | undefined;
  let off: TestSluice | undefined;
  /** Tracing on, sample_ratio 0: no trace starts here. */
  let unsampled: TestSluice | undefined;
  let urls: string[] = [];

  before(async () => {
    // Node 0 always answers 503 (a retryable failure); node 1 answers 200.
    nodes = [0, 1].map((i) =>
      createServer((req, res) => {
        seen[i]!.push(req.headers['traceparent'] as string | undefined);
        contexts.push(received(req));
        void body(req).then(() => {
          res.writeHead(i === 0 ? 503 : 200, { 'content-type': 'application/json' });
          res.end(i === 0 ? '{"error":{"message":"busy"}}' : '{"choices":[{"message":{"content":"hi"}}]}');
        });
      }),
    );
    urls = [await listen(nodes[0]!), await listen(nodes[1]!)];
    collector = createServer((req, res) => {
      void body(req).then((b) => {
        assert.equal(req.url, '/v1/traces');
        assert.equal(req.headers['content-type'], 'application/json');
        exports.push(JSON.parse(b) as OtlpBody);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    const collectorUrl = await listen(collector);
    t = await startTestSluice(
      basicConfig(
        urls,
        `tracing:
  endpoint: ${collectorUrl}/v1/traces
  service_name: sluice-test
  flush_interval_ms: 50
`,
        { pool: '    balance: { kind: round-robin }', route: '    retries: { max: 1 }' },
      ),
    );
    off = await startTestSluice(basicConfig([urls[1]!]));
    unsampled = await startTestSluice(
      basicConfig(
        [urls[1]!],
        `tracing:
  endpoint: ${collectorUrl}/v1/traces
  sample_ratio: 0
  flush_interval_ms: 50
`,
      ),
    );
  });

  after(async () => {
    await t?.close();
    await off?.close();
    await unsampled?.close();
    for (const n of nodes) await closeServer(n);
    await closeServer(collector);
  });

  function spans(): OtlpSpan[] {
    return exports.flatMap((e) => e.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
  }

  it('continues an incoming trace, gives each attempt its own span and exports them to the collector', async () => {
    seen[0]!.length = 0;
    seen[1]!.length = 0;
    // Round-robin over two nodes with one retry: one request meets node 0 (503) and then node 1.
    for (let i = 0; i < 2; i++) {
      const r = await fetch(
        `${t!.url}/v1/chat/completions`,
        chatRequest({}, { traceparent: `00-${TRACE}-${PARENT}-01` }),
      );
      assert.equal(r.status, 200);
      await r.text();
    }
    const forwarded = [...seen[0]!, ...seen[1]!];
    assert.equal(forwarded.length, 3, 'two requests, one of them retried');
    const ids = forwarded.map((v) => {
      const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(v ?? '');
      assert.ok(m !== null, `forwarded traceparent ${v}`);
      assert.equal(m[1], TRACE, 'the same trace');
      return m[2]!;
    });
    assert.equal(new Set(ids).size, 3, 'each attempt forwards its own span id');
    assert.ok(!ids.includes(PARENT));
    await waitFor(
      () => spans().filter((s) => s.traceId === TRACE).length >= 5,
      5000,
      'the spans at the collector',
    );
    const mine = spans().filter((s) => s.traceId === TRACE);
    const servers = mine.filter((s) => s.kind === 2);
    assert.equal(servers.length, 2);
    for (const s of servers) {
      assert.equal(s.parentSpanId, PARENT);
      assert.equal(s.name, 'POST all');
      assert.equal(attr(s, 'http.response.status_code'), '200');
      assert.equal(attr(s, 'sluice.route'), 'all');
    }
    const attempts = mine.filter((s) => s.kind === 3);
    assert.deepEqual(
      attempts.map((s) => s.spanId).sort(),
      [...ids].sort(),
      'attempt spans are the forwarded ids',
    );
    for (const a of attempts) {
      const parent = servers.find((s) => s.spanId === a.parentSpanId);
      assert.ok(parent !== undefined, 'an attempt is a child of its request span');
      assert.ok(BigInt(a.startTimeUnixNano) >= BigInt(parent.startTimeUnixNano));
      assert.ok(BigInt(a.endTimeUnixNano) <= BigInt(parent.endTimeUnixNano));
    }
    const failed = attempts.filter((a) => attr(a, 'sluice.outcome') === 'retryable_status');
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.status.code, 2);
    const service = exports[0]!.resourceSpans[0]!.resource.attributes.find((a) => a.key === 'service.name');
    assert.equal(service?.value.stringValue, 'sluice-test');
  });

  it('starts a new trace for a request without traceparent', async () => {
    seen[1]!.length = 0;
    seen[0]!.length = 0;
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    await r.text();
    const v = seen[1]!.at(-1) ?? '';
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(v);
    assert.ok(m !== null, `forwarded ${v}`);
    assert.notEqual(m[1], TRACE);
    await waitFor(() => spans().some((s) => s.traceId === m[1] && s.kind === 2), 5000, 'the new trace');
    const root = spans().find((s) => s.traceId === m[1] && s.kind === 2)!;
    assert.equal(root.parentSpanId, undefined);
  });

  it('passes an unsampled traceparent on untouched and records nothing for it', async () => {
    seen[1]!.length = 0;
    seen[0]!.length = 0;
    const unsampled = `00-${'a'.repeat(32)}-${PARENT}-00`;
    for (let i = 0; i < 2; i++)
      await (
        await fetch(`${t!.url}/v1/chat/completions`, chatRequest({}, { traceparent: unsampled }))
      ).text();
    assert.ok([...seen[0]!, ...seen[1]!].every((v) => v === unsampled));
    await (await fetch(`${t!.adminUrl}/metrics`)).text();
    assert.equal(spans().filter((s) => s.traceId === 'a'.repeat(32)).length, 0);
  });

  /** The single traceparent each attempt carried; fails when an attempt carried none or several. */
  function singleTraceparents(from: number): { traceId: string; spanId: string }[] {
    const got = contexts.slice(from);
    assert.ok(got.length > 0, 'the request reached a node');
    return got.map((c) => {
      assert.equal(
        c.traceparent.length,
        1,
        `exactly one traceparent upstream: ${JSON.stringify(c.traceparent)}`,
      );
      const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(c.traceparent[0]!);
      assert.ok(m !== null, `forwarded ${c.traceparent[0]}`);
      return { traceId: m[1]!, spanId: m[2]! };
    });
  }

  it('starts a new trace for a request with two traceparent headers and sends exactly one upstream', async () => {
    const other = 'b'.repeat(32);
    for (const first of ['01', '00']) {
      const from = contexts.length;
      const status = await sendWith(t!.url, [
        ['traceparent', `00-${TRACE}-${PARENT}-${first}`],
        ['tracestate', 'vendor=opaque'],
        ['traceparent', `00-${other}-${PARENT}-01`],
      ]);
      assert.equal(status, 200);
      const ids = singleTraceparents(from);
      for (const { traceId } of ids) {
        assert.notEqual(traceId, TRACE, 'not the first header’s trace');
        assert.notEqual(traceId, other, 'not the second header’s trace');
        assert.equal(traceId, ids[0]!.traceId, 'one trace across the attempts');
      }
      assert.deepEqual(
        contexts.slice(from).flatMap((c) => c.tracestate),
        [],
        'the tracestate of a trace not continued',
      );
      await waitFor(
        () => spans().some((s) => s.traceId === ids[0]!.traceId && s.kind === 2),
        5000,
        'the new trace at the collector',
      );
      const root = spans().find((s) => s.traceId === ids[0]!.traceId && s.kind === 2)!;
      assert.equal(root.parentSpanId, undefined, 'a trace started here has no parent');
    }
  });

  it('drops a tracestate that comes without a valid traceparent', async () => {
    for (const lines of [
      [['tracestate', 'vendor=opaque']],
      [
        ['traceparent', `00-${TRACE}-${'0'.repeat(16)}-01`],
        ['tracestate', 'vendor=opaque'],
      ],
      [
        ['traceparent', 'not-a-traceparent'],
        ['tracestate', 'vendor=opaque'],
        ['tracestate', 'other=1'],
      ],
    ] as [string, string][][]) {
      const from = contexts.length;
      assert.equal(await sendWith(t!.url, lines), 200);
      const ids = singleTraceparents(from);
      assert.ok(ids.every((id) => id.traceId !== TRACE));
      assert.deepEqual(
        contexts.slice(from).flatMap((c) => c.tracestate),
        [],
        `no tracestate upstream for ${JSON.stringify(lines)}`,
      );
    }
  });

  it('forwards the tracestate of a trace it continues, unchanged', async () => {
    const from = contexts.length;
    const status = await sendWith(t!.url, [
      ['traceparent', `00-${TRACE}-${PARENT}-01`],
      ['tracestate', 'vendor=opaque'],
    ]);
    assert.equal(status, 200);
    const ids = singleTraceparents(from);
    assert.ok(ids.every((id) => id.traceId === TRACE && id.spanId !== PARENT));
    for (const c of contexts.slice(from)) assert.deepEqual(c.tracestate, ['vendor=opaque']);
  });

  it('sends no client trace context it does not continue when the new trace is not sampled', async () => {
    const from = contexts.length;
    assert.equal(
      await sendWith(unsampled!.url, [
        ['traceparent', `00-${TRACE}-${PARENT}-01`],
        ['traceparent', `00-${TRACE}-${PARENT}-01`],
        ['tracestate', 'vendor=opaque'],
      ]),
      200,
    );
    assert.equal(await sendWith(unsampled!.url, [['tracestate', 'vendor=opaque']]), 200);
    assert.deepEqual(contexts.slice(from), [
      { traceparent: [], tracestate: [] },
      { traceparent: [], tracestate: [] },
    ]);
    // A valid unsampled traceparent is still passed on untouched, with its tracestate.
    const tp = `00-${TRACE}-${PARENT}-00`;
    assert.equal(
      await sendWith(unsampled!.url, [
        ['traceparent', tp],
        ['tracestate', 'vendor=opaque'],
      ]),
      200,
    );
    assert.deepEqual(contexts.at(-1), { traceparent: [tp], tracestate: ['vendor=opaque'] });
  });

  it('forwards traceparent untouched when tracing is off', async () => {
    seen[1]!.length = 0;
    const tp = `00-${TRACE}-${PARENT}-01`;
    await (await fetch(`${off!.url}/v1/chat/completions`, chatRequest({}, { traceparent: tp }))).text();
    assert.deepEqual(seen[1], [tp]);
  });
});
