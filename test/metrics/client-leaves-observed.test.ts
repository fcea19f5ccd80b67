/**
 * What operators see of requests clients leave, and of routes a reload removes: an aborted
 * request's attempt span reaches the collector as cancelled, a client that leaves while still
 * sending its body is counted in `sluice_requests_aborted_total` (route ""), and a route a reload
 * removes leaves `/metrics` as it leaves `/admin/stats`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { RawConnection } from '../helpers/raw-http.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PARENT = 'b7ad6b7169203331';

interface Span {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  kind: number;
  attributes: { key: string; value: { stringValue?: string; intValue?: string } }[];
}

function attr(s: Span, key: string): string | undefined {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v?.stringValue ?? v?.intValue;
}

async function metrics(t: TestSluice): Promise<string> {
  return (await fetch(`${t.adminUrl}/metrics`)).text();
}

describe('requests clients leave, and removed routes, in traces and metrics', { timeout: 30_000 }, () => {
  let node: ScriptedNode | null = null;
  let collector: Server | null = null;
  let t: TestSluice | null = null;
  const spans: Span[] = [];

  before(async () => {
    // Answers after 2 s: long enough for a client to leave first.
    node = await startScriptedNode((req, res) => {
      req.resume();
      const timer = setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"choices":[]}');
      }, 2_000);
      res.on('close', () => clearTimeout(timer));
    });
    collector = createServer((req, res) => {
      let b = '';
      req.on('data', (d: Buffer) => (b += d.toString()));
      req.on('end', () => {
        const body = JSON.parse(b) as { resourceSpans: { scopeSpans: { spans: Span[] }[] }[] };
        for (const r of body.resourceSpans) for (const s of r.scopeSpans) spans.push(...s.spans);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
    await new Promise<void>((resolve) => collector!.listen(0, '127.0.0.1', resolve));
    const port = (collector.address() as AddressInfo).port;
    t = await startTestSluice(
      basicConfig(
        [node.url],
        `tracing:
  endpoint: http://127.0.0.1:${port}/v1/traces
  flush_interval_ms: 50
`,
      ),
    );
  });

  after(async () => {
    await t?.close().catch(() => undefined);
    await node?.close();
    collector?.closeAllConnections();
    await new Promise<void>((resolve) => (collector === null ? resolve() : collector.close(() => resolve())));
  });

  it('exports the attempt of a request its client left, as cancelled, under the request span', async () => {
    const ac = new AbortController();
    const pending = fetch(`${t!.url}/v1/chat/completions`, {
      ...chatRequest({}, { traceparent: `00-${TRACE}-${PARENT}-01` }),
      signal: ac.signal,
    });
    setTimeout(() => ac.abort(), 300);
    await assert.rejects(pending);
    await waitFor(() => spans.some((s) => s.traceId === TRACE && s.kind === 2), 5_000, 'the request span');
    // The request span and its attempt travel in one export: give a late attempt span a moment.
    await new Promise((r) => setTimeout(r, 200));
    const mine = spans.filter((s) => s.traceId === TRACE);
    const server = mine.find((s) => s.kind === 2)!;
    assert.equal(attr(server, 'http.response.status_code'), '499');
    const attempts = mine.filter((s) => s.kind === 3);
    assert.equal(attempts.length, 1, 'one attempt span');
    assert.equal(attempts[0]!.parentSpanId, server.spanId);
    assert.equal(attr(attempts[0]!, 'sluice.outcome'), 'cancelled');
  });

  it('counts a client that leaves while sending its body', async () => {
    const before = /sluice_requests_aborted_total\{route=""\} (\d+)/.exec(await metrics(t!));
    assert.ok(before !== null, 'the unrouted series is present from the start');
    const host = new URL(t!.url).host;
    const c = await RawConnection.open(t!.url);
    await c.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"mo`,
    );
    await new Promise((r) => setTimeout(r, 100));
    c.socket.destroy();
    await waitFor(
      async () =>
        Number(/sluice_requests_aborted_total\{route=""\} (\d+)/.exec(await metrics(t!))?.[1]) ===
        Number(before[1]) + 1,
      5_000,
      'the abort counted',
    );
  });

  it('drops the counters of a route a reload removed from /metrics', async () => {
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.status, 200);
    await r.text();
    assert.match(await metrics(t!), /sluice_requests_total\{route="all",code="200"\} [1-9]/);
    const renamed = (await readFile(t!.configPath, 'utf8')).replace('name: all', 'name: renamed');
    await writeFile(t!.configPath, renamed);
    const reload = (await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as {
      result: string;
    };
    assert.equal(reload.result, 'applied');
    const after = await metrics(t!);
    assert.doesNotMatch(after, /route="all"/);
    assert.match(after, /sluice_requests_aborted_total\{route="renamed"\} 0/);
    const stats = (await (await fetch(`${t!.adminUrl}/admin/stats`)).json()) as {
      routes: Record<string, unknown>;
    };
    assert.equal(stats.routes['all'], undefined);
  });
});
