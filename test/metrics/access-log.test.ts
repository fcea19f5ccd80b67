/**
 * The access log: one JSON line per request with its id, tenant, route, pool, node, model, status,
 * bytes, time to first token, duration, attempts and refusal reason; never a key, a body or a
 * query string; successful requests sampled by sample_rate while failures are always written, a
 * stream that broke after its 200 head included (an `error` line, kept at level warn).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { refusedPort } from '../helpers/refused-port.js';
import { startScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const KEY = 'sk-access-log-secret-5678';

interface Line {
  level: string;
  time: string;
  msg: string;
  request_id: string;
  method: string;
  path: string;
  tenant: string | null;
  route: string | null;
  pool: string | null;
  node: string | null;
  model: string | null;
  status: number;
  bytes: number;
  ttft_ms: number | null;
  duration_ms: number;
  attempts: number;
  refusal: string | null;
  error: string | null;
}

function config(nodes: string[], sampleRate: number, level = 'info'): string {
  return basicConfig(
    nodes,
    `tenants:
  - name: team-a
    keys: [{ env: SLUICE_TEST_ACCESS_KEY }]
access_log:
  destination: logs/access.log
  level: ${level}
  sample_rate: ${sampleRate}
`,
  );
}

function chat(
  t: TestSluice,
  { n, ...body }: Record<string, unknown>,
  key: string | null,
  query = '',
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(`${t.url}/v1/chat/completions${query}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-request-id': `req-${String(n)}`,
      ...(key === null ? {} : { authorization: `Bearer ${key}` }),
      ...headers,
    },
    body: JSON.stringify({
      model: 'llama-test',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
      ...body,
    }),
  });
}

async function lines(t: TestSluice, n: number): Promise<Line[]> {
  const file = join(dirname(t.configPath), 'logs', 'access.log');
  let text = '';
  await waitFor(
    async () => {
      text = await readFile(file, 'utf8').catch(() => '');
      return text.split('\n').filter((l) => l !== '').length >= n;
    },
    5000,
    `${n} access-log lines`,
  );
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);
}

describe('access log', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;
  let sampled: TestSluice | undefined;

  before(async () => {
    process.env['SLUICE_TEST_ACCESS_KEY'] = KEY;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls, 1));
    sampled = await startTestSluice(config(fleet.urls, 0));
  });

  after(async () => {
    await t?.close();
    await sampled?.close();
    await fleet?.close();
  });

  it('writes one line per request with what an operator needs, and no key, body or query', async () => {
    for (const [n, stream] of [
      [1, false],
      [2, true],
    ] as const) {
      const r = await chat(t!, { n, stream }, KEY, '?api_key=should-not-appear');
      assert.equal(r.status, 200);
      await r.text();
    }
    const refused = await chat(t!, { n: 3 }, null);
    assert.equal(refused.status, 401);
    const refusal = await refused.text();
    const got = await lines(t!, 3);
    assert.equal(got.length, 3);
    const [plain, stream, denied] = got as [Line, Line, Line];
    assert.equal(plain.msg, 'request');
    assert.equal(plain.level, 'info');
    assert.equal(plain.request_id, 'req-1');
    assert.equal(plain.path, '/v1/chat/completions');
    assert.equal(plain.tenant, 'team-a');
    assert.equal(plain.route, 'all');
    assert.equal(plain.pool, 'gpu');
    assert.equal(plain.node, fleet!.urls[0]);
    assert.equal(plain.model, 'llama-test');
    assert.equal(plain.status, 200);
    assert.ok(plain.bytes > 0);
    assert.equal(plain.ttft_ms, null);
    assert.ok(plain.duration_ms > 0);
    assert.equal(plain.attempts, 1);
    assert.equal(plain.refusal, null);
    assert.ok(!Number.isNaN(Date.parse(plain.time)));
    assert.equal(stream.request_id, 'req-2');
    assert.ok(stream.ttft_ms !== null && stream.ttft_ms > 0 && stream.ttft_ms <= stream.duration_ms);
    assert.equal(denied.level, 'warn');
    assert.equal(denied.status, 401);
    assert.equal(denied.tenant, null);
    assert.equal(denied.refusal, 'invalid_api_key');
    assert.equal(denied.attempts, 0);
    assert.equal(denied.bytes, Buffer.byteLength(refusal), "the bytes of Sluice's own reply");
    const raw = await readFile(join(dirname(t!.configPath), 'logs', 'access.log'), 'utf8');
    assert.equal(raw.includes(KEY), false, 'no API key');
    assert.equal(raw.includes('should-not-appear'), false, 'no query string');
    assert.equal(raw.includes('"messages"'), false, 'no body');
  });

  it('samples successful requests out at sample_rate 0 but still writes failures', async () => {
    for (let n = 10; n < 15; n++) await (await chat(sampled!, { n }, KEY)).text();
    await (await chat(sampled!, { n: 15 }, 'wrong-key')).text();
    const got = await lines(sampled!, 1);
    assert.deepEqual(
      got.map((l) => [l.request_id, l.status]),
      [['req-15', 401]],
    );
    const metrics = await (await fetch(`${sampled!.adminUrl}/metrics`)).text();
    assert.match(metrics, /^sluice_access_log_sampled_out_total 5$/m);
  });

  it('writes a stream that failed after its 200 head as an error line, at level warn and never sampled out', async () => {
    // Level warn and sample_rate 0: only failures may be written, and every one of them must be.
    const d = await startTestSluice(config(fleet!.urls, 0, 'warn'));
    try {
      const ok = await chat(d, { n: 40, stream: true }, KEY);
      assert.equal(ok.status, 200);
      await ok.text();
      for (const n of [41, 42]) {
        const r = await chat(d, { n, stream: true, max_tokens: 20 }, KEY, '', { 'x-sim-drop-after': '2' });
        assert.equal(r.status, 200);
        assert.match(await r.text(), /"code":"upstream_connection_reset"/);
      }
      // A stream still running when a drain reaches its deadline ends with server_shutting_down.
      const slow = await chat(d, { n: 43, stream: true, max_tokens: 50 }, KEY, '', {
        'x-sim-chunk-delay-ms': '200',
      });
      assert.equal(slow.status, 200);
      const reader = slow.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>;
      await reader.read();
      assert.equal(await d.sluice.drain(300), 1);
      let rest = '';
      for (;;) {
        const r = await reader.read();
        if (r.done) break;
        rest += new TextDecoder().decode(r.value);
      }
      assert.match(rest, /"code":"server_shutting_down"/);
      const got = await lines(d, 3);
      assert.deepEqual(
        got.map((l) => [l.request_id, l.level, l.status, l.error]),
        [
          ['req-41', 'error', 200, 'upstream_connection_reset'],
          ['req-42', 'error', 200, 'upstream_connection_reset'],
          ['req-43', 'error', 200, 'server_shutting_down'],
        ],
      );
    } finally {
      await d.close();
    }
  });

  it('names the node that failed when no node answered', async () => {
    const dead = `http://127.0.0.1:${await refusedPort()}`;
    const d = await startTestSluice(config([dead], 1));
    try {
      const r = await chat(d, { n: 20 }, KEY);
      assert.equal(r.status, 502);
      await r.text();
      const [line] = await lines(d, 1);
      assert.equal(line!.request_id, 'req-20');
      assert.equal(line!.status, 502);
      assert.equal(line!.node, dead, 'the node tried is named, not null');
      assert.equal(line!.error, 'upstream_connect_error');
    } finally {
      await d.close();
    }
  });

  it('counts the error event that ends a broken stream in bytes', async () => {
    // Two events, the second cut mid-line, then the connection drops.
    const node = await startScriptedNode((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choi');
      setTimeout(() => res.socket?.destroy(), 50);
    });
    const d = await startTestSluice(config([node.url], 1));
    try {
      const r = await chat(d, { n: 30, stream: true }, KEY);
      assert.equal(r.status, 200);
      const received = Buffer.from(await r.arrayBuffer());
      assert.match(received.toString(), /\n\ndata: \{"error":.*"code":"upstream_connection_reset"/);
      const [line] = await lines(d, 1);
      assert.equal(line!.request_id, 'req-30');
      assert.equal(line!.bytes, received.length, 'bytes is what the client received, error event included');
    } finally {
      await d.close();
      await node.close();
    }
  });
});
