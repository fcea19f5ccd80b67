/**
 * The broken-node table: every way a node can break an exchange (see broken-node.ts), what the
 * client must see for each, and the check of one case against a running Sluice — the client's
 * answer, concurrent clients unaffected, the broken connection never reused, and every in-flight
 * count, admission slot, concurrency slot and token reservation back to zero on /metrics and
 * /admin/nodes. Shared by `test/lifecycle/broken-nodes.test.ts` and `npm run chaos`.
 */
import { BrokenNode, OK_JSON } from './broken-node.js';

/** The tenant key the table's config expects in `BROKEN_NODES_KEY`. */
export const FAULT_TABLE_KEY = 'sk-broken-nodes-table';

/** Node timeouts of the table's config: small enough to run fast, large enough for a busy machine. */
const TTFB_MS = 600;
const IDLE_MS = 600;

/**
 * The config the table runs against: one pool of `nodes` behind least-request (so in-flight tokens
 * are tracked), admission control, no outlier ejection (a case must not eject the node for the
 * next one), and one tenant with token and concurrency limits. `head` is the listener and admin
 * part; `pool` adds pool keys.
 */
export function faultTableConfig(head: string, nodes: readonly string[], pool = ''): string {
  return `${head}pools:
  - name: gpu
    balance: { kind: least-request }
    timeouts: { connect_ms: 1000, ttfb_ms: ${TTFB_MS}, idle_ms: ${IDLE_MS}, total_ms: 20000 }
    admission: { max_in_flight_per_node: 32, max_queue: 64 }
${pool === '' ? '    health: { outlier: { consecutive_failures: 0 } }\n' : pool}    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
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
export type Outcome =
  | { kind: 'status'; status: number; code: string }
  | { kind: 'sse-error'; code: string }
  | { kind: 'cut' }
  | { kind: 'ok' };

/** One row of the table. */
export interface FaultCase {
  /** The `x-fault` the node acts on (broken-node.ts). */
  fault: string;
  /** The client asks for an SSE stream. */
  stream: boolean;
  expect: Outcome;
  /** The exchange is valid HTTP, so its connection may be reused. Default false. */
  reusable?: boolean;
}

const status = (s: number, code: string): Outcome => ({ kind: 'status', status: s, code });
const sseError = (code: string): Outcome => ({ kind: 'sse-error', code });
const CUT: Outcome = { kind: 'cut' };

/**
 * The table. A failure before any byte reached the client is a clean 502/504 with the OpenAI error
 * body (Sluice holds a streamed head back until the first body bytes); after that, a stream ends
 * with an SSE error event and any other body is cut.
 */
export const FAULT_CASES: readonly FaultCase[] = [
  { fault: 'reset-before-head', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'close-before-head', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'stall-before-head', stream: true, expect: status(504, 'upstream_timeout') },
  { fault: 'partial-head', stream: false, expect: status(504, 'upstream_timeout') },
  { fault: 'partial-head-close', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'garbage-status', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'bad-status-code', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'nul-in-header', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'space-before-colon', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'obs-fold', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'huge-head', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'duplicate-content-length', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'conflicting-content-length', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-list', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-plus', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-negative', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'content-length-and-chunked', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'unknown-transfer-encoding', stream: false, expect: status(502, 'upstream_protocol_error') },
  { fault: 'informational-then-close', stream: false, expect: status(502, 'upstream_connection_reset') },
  { fault: 'bad-chunk-size', stream: true, expect: status(502, 'upstream_protocol_error') },
  { fault: 'stall-after-head', stream: true, expect: status(504, 'upstream_timeout') },
  { fault: 'bad-chunk-after-data', stream: true, expect: sseError('upstream_protocol_error') },
  { fault: 'chunk-overrun', stream: true, expect: sseError('upstream_protocol_error') },
  { fault: 'stall-mid-stream', stream: true, expect: sseError('upstream_idle_timeout') },
  { fault: 'sse-no-terminator', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'die-mid-stream', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'close-mid-stream', stream: true, expect: sseError('upstream_connection_reset') },
  { fault: 'short-body', stream: false, expect: CUT },
  { fault: 'short-body-stall', stream: false, expect: CUT },
  { fault: 'die-mid-json', stream: false, expect: CUT },
  { fault: 'long-body', stream: false, expect: { kind: 'ok' } },
  { fault: 'malformed-sse', stream: true, expect: { kind: 'ok' }, reusable: true },
];

/** Where a Sluice under test answers. */
export interface FaultTarget {
  /** `http://127.0.0.1:PORT` of the listener. */
  url: string;
  /** `http://127.0.0.1:PORT` of the admin API. */
  adminUrl: string;
}

/** A client's view of one request. */
export interface ClientResult {
  status: number;
  body: string;
  /** The body ended in an error (a cut connection) rather than its proper end. */
  cut: boolean;
}

/** Sends one chat request as the table's tenant, with `fault` for the node (`''`: none). */
export async function sendChat(
  t: FaultTarget,
  fault: string,
  stream: boolean,
  maxTokens = 16,
): Promise<ClientResult> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    authorization: `Bearer ${FAULT_TABLE_KEY}`,
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

/** The series that must be 0 when nothing runs, with the ones that must exist. */
const WATCHED =
  /^(sluice_(?:requests_in_flight|upstream_in_flight|admission_queued|admission_in_flight|ratelimit_concurrent_requests|ratelimit_reserved_tokens)(?:\{[^}]*\})?) (\S+)$/;
const REQUIRED = [
  'sluice_requests_in_flight',
  'sluice_admission_in_flight{pool="gpu"}',
  'sluice_ratelimit_concurrent_requests',
  'sluice_ratelimit_reserved_tokens',
];

/** The watched gauges from /metrics. */
export async function watchedGauges(t: FaultTarget): Promise<Map<string, number>> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = WATCHED.exec(line);
    if (m !== null) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

/** A node as /admin/nodes shows it. */
export interface NodeView {
  available: boolean;
  in_flight: number;
  in_flight_tokens: number | null;
}

export async function nodeViews(t: FaultTarget): Promise<NodeView[]> {
  const pools = (await (await fetch(`${t.adminUrl}/admin/nodes`)).json()) as { nodes: NodeView[] }[];
  return pools.flatMap((p) => p.nodes);
}

async function poll(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Waits (up to 3 s) until every watched gauge is 0 and every node idle; returns the problem found
 * otherwise, or null.
 */
export async function baselineProblem(t: FaultTarget, what: string): Promise<string | null> {
  let last = new Map<string, number>();
  let nodes: NodeView[] = [];
  const ok = await poll(async () => {
    last = await watchedGauges(t);
    nodes = await nodeViews(t);
    return (
      [...last.values()].every((v) => v === 0) &&
      nodes.every((n) => n.in_flight === 0 && (n.in_flight_tokens ?? 0) === 0)
    );
  }, 3000);
  if (!ok)
    return `counters not back to zero after ${what}: ${JSON.stringify([...last])} nodes ${JSON.stringify(nodes)}`;
  const missing = REQUIRED.filter((name) => !last.has(name));
  return missing.length === 0 ? null : `/metrics lacks ${missing.join(', ')}`;
}

/** Tokens left in the table tenant's bucket, from the rate-limit headers of a cheap request. */
export async function remainingTokens(t: FaultTarget): Promise<number> {
  const r = await fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${FAULT_TABLE_KEY}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
  });
  await r.arrayBuffer();
  return Number(r.headers.get('x-ratelimit-remaining-tokens') ?? NaN);
}

/** What is wrong with `r` for case `c`, or null. */
function outcomeProblem(c: FaultCase, r: ClientResult): string | null {
  const got = `got ${r.status} ${JSON.stringify(r.body.slice(0, 200))}${r.cut ? ' (cut)' : ''}`;
  const e = c.expect;
  switch (e.kind) {
    case 'status': {
      if (r.status !== e.status || r.cut) return `expected ${e.status}, ${got}`;
      try {
        const body = JSON.parse(r.body) as { error?: { code?: string } };
        return body.error?.code === e.code ? null : `expected code ${e.code}, ${got}`;
      } catch {
        return `expected an OpenAI error body, ${got}`;
      }
    }
    case 'sse-error': {
      if (r.status !== 200 || r.cut) return `expected a 200 stream ending in an error event, ${got}`;
      const events = r.body.split('\n\n').filter((x) => x.trim() !== '');
      const last = events.at(-1) ?? '';
      if (!last.startsWith('data: {"error":')) return `expected a final SSE error event, ${got}`;
      const err = JSON.parse(last.slice('data: '.length)) as { error: { code: string } };
      return err.error.code === e.code ? null : `expected error code ${e.code}, ${got}`;
    }
    case 'cut':
      return r.status === 200 && r.cut ? null : `expected a cut 200 body, ${got}`;
    case 'ok':
      return r.status === 200 && !r.cut ? null : `expected a whole 200, ${got}`;
  }
}

/**
 * Runs case `c` against `t` (whose only pool is `node`, configured with `faultTableConfig`) and
 * returns every problem found (empty: the case passed): the faulty request with four healthy
 * requests alongside, the broken connection closed and never reused, the next request answered by
 * the node, all gauges back to zero, and a refund of the whole token pre-debit when the client got
 * an error status.
 */
export async function runFaultCase(t: FaultTarget, node: BrokenNode, c: FaultCase): Promise<string[]> {
  const problems: string[] = [];
  const warm = await sendChat(t, '', false);
  if (warm.status !== 200) return [`the warm-up request got ${warm.status}`];
  const before = await baselineProblem(t, 'the warm-up');
  if (before !== null) return [before];
  const tokensBefore = await remainingTokens(t);
  const others = Array.from({ length: 4 }, (_, i) => sendChat(t, i % 2 === 0 ? '' : 'ok-sse', i % 2 === 1));
  const result = await sendChat(t, c.fault, c.stream, 100_000);
  const outcome = outcomeProblem(c, result);
  if (outcome !== null) problems.push(outcome);
  for (const o of await Promise.all(others)) {
    if (o.status !== 200 || o.cut)
      problems.push(`a concurrent client got ${o.status}${o.cut ? ' (cut)' : ''}`);
  }
  const broken = node.last(c.fault);
  if (broken === undefined) return [...problems, 'the node never received the faulty request'];
  if (c.reusable !== true) {
    try {
      await node.until(() => node.isClosed(broken.conn), 3000, `connection ${broken.conn} to close`);
    } catch {
      problems.push('the broken connection was left open');
    }
  }
  const next = await sendChat(t, '', false);
  if (next.status !== 200 || next.body !== OK_JSON)
    problems.push(`the next request got ${next.status} ${JSON.stringify(next.body.slice(0, 100))}`);
  else if (c.reusable !== true && node.last('')!.conn === broken.conn)
    problems.push('the broken connection was reused');
  const after = await baselineProblem(t, c.fault);
  if (after !== null) problems.push(after);
  if (c.expect.kind === 'status') {
    // No node answered: the whole pre-debit (100,000 tokens) must have been given back.
    const tokensAfter = await remainingTokens(t);
    if (!(tokensAfter > tokensBefore - 50_000))
      problems.push(`token charge kept: ${tokensBefore} tokens left before, ${tokensAfter} after`);
  }
  return problems;
}

/** Timing of the 503s a pool without an available node answers with. */
export interface NoNodeResult {
  problems: string[];
  medianMs: number;
  p99Ms: number;
}

/**
 * Sends `n` requests one after another on one keep-alive connection to `t`, whose pool has no
 * available node, and checks each answer: 503 `no_healthy_upstream` with Retry-After. The times are
 * Sluice's answer times as a raw client sees them (no HTTP client library in the way).
 */
export async function noNodeLatency(t: FaultTarget, n: number): Promise<NoNodeResult> {
  const { connect } = await import('node:net');
  const { performance } = await import('node:perf_hooks');
  const u = new URL(t.url);
  const socket = connect({ host: u.hostname, port: Number(u.port) });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let buf = Buffer.alloc(0);
  let wake: (() => void) | null = null;
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    wake?.();
  });
  socket.on('error', () => wake?.());
  const body = '{"model":"m","messages":[]}';
  const request = Buffer.from(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${FAULT_TABLE_KEY}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  );
  const problems: string[] = [];
  const times: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      socket.write(request);
      let head = '';
      let need = -1;
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end >= 0) {
          head = buf.subarray(0, end).toString('latin1');
          const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
          need = end + 4 + Number(cl?.[1] ?? 0);
          if (buf.length >= need) break;
        }
        if (socket.destroyed) throw new Error('the connection closed');
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, 1000);
        });
      }
      times.push(performance.now() - t0);
      const answer = buf.subarray(head.length + 4, need).toString();
      buf = buf.subarray(need);
      if (!head.startsWith('HTTP/1.1 503')) problems.push(`answer ${i}: ${head.split('\r\n')[0]}`);
      else if (!/\r\nretry-after: *\d+/i.test(head)) problems.push(`answer ${i}: no Retry-After`);
      else if (!answer.includes('"no_healthy_upstream"')) problems.push(`answer ${i}: ${answer}`);
    }
  } finally {
    socket.destroy();
  }
  times.sort((a, b) => a - b);
  return {
    problems,
    medianMs: times[times.length >> 1] ?? NaN,
    p99Ms: times[Math.min(times.length - 1, Math.floor(times.length * 0.99))] ?? NaN,
  };
}
