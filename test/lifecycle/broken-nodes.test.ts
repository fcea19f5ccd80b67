/**
 * Broken nodes, table-driven: a raw `node:net` node that resets, stalls, breaks its framing, sends a
 * bad chunk, a short body, malformed SSE or dies mid-stream. For every case the client gets a clean
 * error (502/504 before the head, an SSE error event or a cut body after it), the broken upstream
 * connection is never used again, concurrent clients of the same node are unaffected, and every
 * in-flight count, admission slot, concurrency slot and token reservation is back to its baseline
 * on /metrics and /admin/nodes afterwards. Also: with every node down, 503 + Retry-After at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { BrokenNode, OK_JSON } from '../helpers/broken-node.js';
import { RawConnection, rawHeader } from '../helpers/raw-http.js';
import { freePort } from '../../loadtest/env/free-port.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-broken-nodes-test';
process.env['BROKEN_NODES_KEY'] = KEY;

/** Timeouts small enough for a test, large enough for a busy machine. */
const TTFB_MS = 600;
const IDLE_MS = 600;

function config(nodes: readonly string[], pool = ''): string {
  return `${LOOPBACK_HEAD}pools:
  - name: gpu
    balance: { kind: least-request }
    timeouts: { connect_ms: 1000, ttfb_ms: ${TTFB_MS}, idle_ms: ${IDLE_MS}, total_ms: 20000 }
    admission: { max_in_flight_per_node: 32, max_queue: 64 }
    health: { outlier: { consecutive_failures: 0 } }
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
${pool}
routes:
  - name: all
    match: {}
    pool: gpu
tenants:
  - name: acme
    keys:
      - env: BROKEN_NODES_KEY
    limits:
      tokens_per_minute: 10000000
      max_concurrent: 64
`;
}

/** How the client must see a case end. */
type Outcome =
  | { kind: 'status'; status: number; code: string }
  | { kind: 'sse-error'; code: string }
  | { kind: 'cut' }
  | { kind: 'ok' };

interface Case {
  fault: string;
  stream: boolean;
  expect: Outcome;
  /** The node itself closes the connection (else Sluice must close it). Default true. */
  reusable?: boolean;
}

const status = (s: number, code: string): Outcome => ({ kind: 'status', status: s, code });
const sseError = (code: string): Outcome => ({ kind: 'sse-error', code });
const CUT: Outcome = { kind: 'cut' };

const CASES: Case[] = [
  { fault: 'reset-before-head', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'close-before-head', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'stall-before-head', stream: true, expect: status(504, 'upstream_timeout') },
  { fault: 'partial-head', stream: false, expect: status(504, 'upstream_timeout') },
  { fault: 'partial-head-close', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'garbage-status', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'bad-status-code', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'nul-in-header', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'space-before-colon', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'huge-head', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'duplicate-content-length', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'conflicting-content-length', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-list', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-plus', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-negative', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-and-chunked', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'unknown-transfer-encoding', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'bad-chunk-size', stream: true, expect: status(502, 'upstream_protocol_error') },
  { fault: 'bad-chunk-after-data', stream: true, expect: sseError('upstream_protocol_error') },
  { fault: 'chunk-overrun', stream: true, expect: sseError('upstream_protocol_error') },
  { fault: 'short-body', stream: false, expect: CUT },
  { fault: 'short-body-stall', stream: false, expect: CUT },
  { fault: 'long-body', stream: false, expect: { kind: 'ok' }, reusable: false },
  { fault: 'obs-fold', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'informational-then-close', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'stall-after-head', stream: true, expect: status(504, 'upstream_idle_timeout') },
  { fault: 'stall-mid-stream', stream: true, expect: sseError('upstream_idle_timeout') },
  { fault: 'sse-no-terminator', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'die-mid-stream', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'close-mid-stream', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'die-mid-json', stream: false, expect: CUT },
  { fault: 'malformed-sse', stream: true, expect: { kind: 'ok' }, reusable: true },
];

interface ClientResult {
  status: number;
  body: string;
  /** The body ended in an error (cut connection) rather than its proper end. */
  cut: boolean;
}

async function send(t: TestSluice, fault: string, stream: boolean, maxTokens = 16): Promise<ClientResult> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    authorization: `Bearer ${KEY}`,
  };
  if (fault !== '') headers['x-fault'] = fault;
  const r = await fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: maxTokens,
      stream,
    }),
  });
  try {
    return { status: r.status, body: await r.text(), cut: false };
  } catch {
    return { status: r.status, body: '', cut: true };
  }
}

/** Reads the values of the series this test watches from /metrics. */
async function gauges(t: TestSluice): Promise<Map<string, number>> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m =
      /^(sluice_(?:requests_in_flight|upstream_in_flight|admission_queued|admission_in_flight|ratelimit_concurrent_requests|ratelimit_reserved_tokens)(?:\{[^}]*\})?) (\S+)$/.exec(
        line,
      );
    if (m !== null) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

interface NodeView {
  in_flight: number;
  in_flight_tokens: number | null;
}

async function nodeViews(t: TestSluice): Promise<NodeView[]> {
  const pools = (await (await fetch(`${t.adminUrl}/admin/nodes`)).json()) as { nodes: NodeView[] }[];
  return pools.flatMap((p) => p.nodes);
}

/** Waits until every watched gauge is 0 and every node is idle; fails with the values otherwise. */
async function assertBaseline(t: TestSluice, what: string): Promise<void> {
  let last = new Map<string, number>();
  let nodes: NodeView[] = [];
  try {
    await waitFor(
      async () => {
        last = await gauges(t);
        nodes = await nodeViews(t);
        return (
          [...last.values()].every((v) => v === 0) &&
          nodes.every((n) => n.in_flight === 0 && (n.in_flight_tokens ?? 0) === 0)
        );
      },
      3000,
      `baseline after ${what}`,
    );
  } catch {
    assert.fail(
      `counters not back to baseline after ${what}: ${JSON.stringify([...last])} nodes ${JSON.stringify(nodes)}`,
    );
  }
  for (const name of [
    'sluice_requests_in_flight',
    'sluice_admission_in_flight{pool="gpu"}',
    'sluice_ratelimit_concurrent_requests',
    'sluice_ratelimit_reserved_tokens',
  ])
    assert.ok(last.has(name), `/metrics has ${name}`);
}

function checkOutcome(c: Case, r: ClientResult): void {
  const label = `${c.fault}: got ${r.status} ${JSON.stringify(r.body.slice(0, 300))}${r.cut ? ' (cut)' : ''}`;
  switch (c.expect.kind) {
    case 'status': {
      assert.equal(r.status, c.expect.status, label);
      assert.equal(r.cut, false, label);
      const body = JSON.parse(r.body) as { error: { code: string } };
      assert.equal(body.error.code, c.expect.code, label);
      return;
    }
    case 'sse-error': {
      assert.equal(r.status, 200, label);
      const events = r.body.split('\n\n').filter((e) => e.trim() !== '');
      const lastEvent = events.at(-1) ?? '';
      assert.match(lastEvent, /^data: \{"error":/, label);
      const err = JSON.parse(lastEvent.slice('data: '.length)) as { error: { code: string } };
      assert.equal(err.error.code, c.expect.code, label);
      return;
    }
    case 'cut':
      assert.equal(r.status, 200, label);
      assert.equal(r.cut, true, `${label}: the client must see a truncated body`);
      return;
    case 'ok':
      assert.equal(r.status, 200, label);
      assert.equal(r.cut, false, label);
  }
}

describe('broken nodes', { timeout: 180_000 }, () => {
  let node: BrokenNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    node = await BrokenNode.start();
    t = await startTestSluice(config([node.url]));
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  for (const c of CASES) {
    it(`${c.fault}${c.stream ? ' (stream)' : ''}: the client gets ${c.expect.kind === 'status' ? c.expect.status : c.expect.kind}, the connection is dropped and every counter returns`, async () => {
      const n = node!;
      const s = t!;
      // Warm a keep-alive connection so a reused broken one would be noticed.
      assert.equal((await send(s, '', false)).status, 200);
      await assertBaseline(s, 'the warm-up');
      const tokensBefore = await remainingTokens(s);
      const others = Array.from({ length: 4 }, (_, i) => send(s, i % 2 === 0 ? '' : 'ok-sse', i % 2 === 1));
      const result = await send(s, c.fault, c.stream, 100_000);
      checkOutcome(c, result);
      for (const o of await Promise.all(others)) {
        assert.equal(o.status, 200, `a concurrent client was affected by ${c.fault}: ${o.body}`);
        assert.equal(o.cut, false, `a concurrent client was cut by ${c.fault}`);
      }
      const broken = n.last(c.fault);
      assert.ok(broken !== undefined, 'the node received the faulty request');
      if (c.reusable !== true) {
        await n.until(
          () => n.isClosed(broken.conn),
          3000,
          `connection ${broken.conn} of ${c.fault} to close`,
        );
      }
      const next = await send(s, '', false);
      assert.equal(next.status, 200, `the next request after ${c.fault}: ${next.body}`);
      assert.equal(next.body, OK_JSON, 'the next request got its own answer');
      if (c.reusable !== true) {
        assert.notEqual(n.last('')!.conn, broken.conn, 'the broken connection was not reused');
      }
      await assertBaseline(s, c.fault);
      if (c.expect.kind === 'status') {
        // No node answered: the whole pre-debit (100,000 tokens) was given back.
        const tokensAfter = await remainingTokens(s);
        assert.ok(
          tokensAfter > tokensBefore - 50_000,
          `token charge refunded after ${c.fault}: ${tokensBefore} before, ${tokensAfter} after`,
        );
      }
    });
  }

  it('answers 503 with Retry-After within 10 ms when every node is down, without queueing', async (tc) => {
    const dead = [await freePort(), await freePort()].map((p) => `http://127.0.0.1:${p}`);
    const d = await startTestSluice(
      config(
        dead,
        '    health: { active: { path: /health, interval_ms: 100, timeout_ms: 100, unhealthy_threshold: 1, healthy_threshold: 1 } }',
      ).replace('    health: { outlier: { consecutive_failures: 0 } }\n', ''),
    );
    try {
      await waitFor(
        async () => (await nodeViews(d)).every((n) => !(n as { available?: boolean }).available),
        5000,
        'both nodes marked down',
      );
      const times: number[] = [];
      const burst = await Promise.all(Array.from({ length: 50 }, () => send(d, '', false)));
      for (const r of burst) assert.equal(r.status, 503);
      // One keep-alive connection, requests one after another: the time is Sluice's, not a client's.
      const conn = await RawConnection.open(d.url);
      try {
        const body = '{"model":"m","messages":[]}';
        const request = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
        for (let i = 0; i < 100; i++) {
          const t0 = performance.now();
          await conn.write(request);
          const r = await conn.readResponse();
          times.push(performance.now() - t0);
          assert.equal(r.status, 503);
          assert.equal(
            (JSON.parse(r.body.toString()) as { error: { code: string } }).error.code,
            'no_healthy_upstream',
          );
          assert.ok(Number(rawHeader(r, 'retry-after')) >= 1, 'Retry-After is set');
        }
      } finally {
        conn.destroy();
      }
      times.sort((a, b) => a - b);
      const median = times[times.length >> 1]!;
      tc.diagnostic(
        `503 with every node down: median ${median.toFixed(2)} ms, p99 ${times[Math.floor(times.length * 0.99)]!.toFixed(2)} ms over ${times.length} requests`,
      );
      assert.ok(
        median < 10,
        `median time to the 503 is ${median.toFixed(2)} ms (all: ${times.map((x) => x.toFixed(1)).join(' ')})`,
      );
      const g = await gauges(d);
      assert.equal(g.get('sluice_admission_queued{pool="gpu"}'), 0);
      const metrics = await (await fetch(`${d.adminUrl}/metrics`)).text();
      assert.match(
        metrics,
        /sluice_admission_total\{pool="gpu",outcome="queued"\} 0\n/,
        'nothing was queued',
      );
      await assertBaseline(d, 'all nodes down');
    } finally {
      await d.close();
    }
  });
});

/** Tokens left in acme's bucket, as the rate-limit headers of a cheap request report them. */
async function remainingTokens(t: TestSluice): Promise<number> {
  const r = await fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
  });
  await r.arrayBuffer();
  const v = r.headers.get('x-ratelimit-remaining-tokens');
  assert.ok(v !== null, 'x-ratelimit-remaining-tokens is sent');
  return Number(v);
}
