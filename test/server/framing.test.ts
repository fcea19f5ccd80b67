/**
 * Integration tests of request framing at the downstream edge, over raw sockets (an HTTP client
 * would never send these requests): ambiguous framing is refused with 400 and a closed connection
 * before anything reaches a node, oversize bodies and heads are refused, and valid chunked bodies
 * pass through byte for byte.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { RawConnection, rawHeader, rawRequest, type RawResponse } from '../helpers/raw-http.js';
import { ENGINES, type Engine } from '../helpers/engines.js';
import { startTestSluice, type TestSluice } from '../helpers/sluice.js';

const MAX_BODY = 65536;
const MAX_HEADER = 4096;

/** A valid completions body: if a node ever receives it, its `served` counter goes up. */
const COMPLETION = '{"model":"sim-chat","prompt":"hello","max_tokens":1}';

let fleet: SimFleet;
let t: TestSluice;

function config(nodeUrl: string, engine: Engine): string {
  return `listeners:
  - name: public
    address: 127.0.0.1
    port: 0
    pipelining: ${engine.pipelining}
    max_body_bytes: ${MAX_BODY}
    max_header_bytes: ${MAX_HEADER}
admin:
  address: 127.0.0.1
  port: 0
pools:
  - name: gpu
    nodes:
      - url: ${nodeUrl}
routes:
  - name: all
    match: {}
    pool: gpu
`;
}

/** Completions the node served, and attempts Sluice sent to any node. */
function upstreamCounts(): { served: number; attempts: number } {
  let attempts = 0;
  for (const n of t.sluice.registry.all()) attempts += n.attempts;
  return { served: fleet.nodes[0]!.stats().served, attempts };
}

/** One valid completion through Sluice on a fresh connection; afterwards, anything sent earlier has landed. */
async function validCompletion(): Promise<void> {
  const res = await fetch(`${t.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: COMPLETION,
  });
  assert.equal(res.status, 200, await res.text());
  await res.arrayBuffer().catch(() => undefined);
}

/**
 * Asserts that `run` caused no upstream traffic: a valid request sent afterwards is the only one the
 * node serves and the only attempt Sluice makes (so the check fails if the refused one leaked).
 */
async function assertNotForwarded(run: () => Promise<void>): Promise<void> {
  const before = upstreamCounts();
  await run();
  await validCompletion();
  const after = upstreamCounts();
  assert.equal(after.served - before.served, 1, 'the node served a refused request');
  assert.equal(after.attempts - before.attempts, 1, 'Sluice sent a refused request upstream');
}

/** Asserts an OpenAI-shaped error body `{"error": {"message", "type", "param", "code"}}` with `code`. */
function assertOpenAiError(r: RawResponse, code: string): void {
  assert.match(
    rawHeader(r, 'content-type') ?? '',
    /^application\/json/,
    `content-type of ${r.body.toString()}`,
  );
  let parsed: unknown;
  assert.doesNotThrow(
    () => {
      parsed = JSON.parse(r.body.toString('utf8'));
    },
    `body is not JSON: ${r.body.toString('latin1')}`,
  );
  const err = (parsed as { error?: Record<string, unknown> }).error;
  assert.ok(err !== undefined && typeof err === 'object', `no "error" object in ${r.body.toString()}`);
  assert.equal(typeof err.message, 'string');
  assert.ok((err.message as string).length > 0);
  assert.equal(err.type, 'invalid_request_error');
  assert.equal(err.param, null);
  assert.equal(err.code, code);
}

/**
 * After the server closed `conn`: what it sent is at most one response, a 400. (A server may also
 * just close a connection that pipelines requests behind malformed framing.)
 */
function assertOnlyARefusal(conn: RawConnection): void {
  const text = conn.pending.toString('latin1');
  const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]);
  assert.ok(statuses.length <= 1, `the server answered ${statuses.length} requests: ${statuses.join(', ')}`);
  if (statuses.length === 1) assert.equal(statuses[0], '400');
}

function chunked(body: Buffer, chunkSize: number): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i < body.length; i += chunkSize) {
    const c = body.subarray(i, i + chunkSize);
    parts.push(Buffer.from(`${c.length.toString(16)}\r\n`, 'latin1'), c, Buffer.from('\r\n', 'latin1'));
  }
  parts.push(Buffer.from('0\r\n\r\n', 'latin1'));
  return Buffer.concat(parts);
}

const len = COMPLETION.length;
const AMBIGUOUS: Record<string, string> = {
  'two identical Content-Length headers': `Content-Length: ${len}\r\nContent-Length: ${len}\r\n\r\n${COMPLETION}`,
  'two conflicting Content-Length headers': `Content-Length: ${len}\r\nContent-Length: ${len - 5}\r\n\r\n${COMPLETION}`,
  'Transfer-Encoding: gzip, chunked': `Transfer-Encoding: gzip, chunked\r\n\r\n${len.toString(16)}\r\n${COMPLETION}\r\n0\r\n\r\n`,
  'two Transfer-Encoding headers': `Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n${len.toString(16)}\r\n${COMPLETION}\r\n0\r\n\r\n`,
};

for (const engine of ENGINES)
  describe(`request framing on the ${engine.name} engine`, { timeout: 60_000 }, () => {
    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      t = await startTestSluice(config(fleet.urls[0]!, engine));
    });

    after(async () => {
      await t?.close();
      await fleet?.close();
    });

    for (const [name, rest] of Object.entries(AMBIGUOUS)) {
      it(`refuses a request with ${name}: 400, OpenAI error body, connection closed, nothing forwarded`, async () => {
        let response: RawResponse | undefined;
        await assertNotForwarded(async () => {
          const sent = await rawRequest(
            t.url,
            `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\n${rest}`,
          );
          response = sent.response;
          assert.equal(response.status, 400);
          assert.equal(await sent.conn.waitClosed(), true, 'the server kept the connection open');
          sent.conn.destroy();
        });
        // Checked last, so a wrong body shape never hides a leak to the node.
        assertOpenAiError(response!, 'bad_framing');
      });
    }

    it('refuses Content-Length together with Transfer-Encoding: 400, connection closed, nothing forwarded', async () => {
      // The uWS parser refuses this one itself, before Sluice's handler runs, so there the body is
      // the parser's own page rather than an OpenAI error body.
      await assertNotForwarded(async () => {
        const sent = await rawRequest(
          t.url,
          `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\nTransfer-Encoding: chunked\r\n\r\n${len.toString(16)}\r\n${COMPLETION}\r\n0\r\n\r\n`,
        );
        assert.equal(sent.response.status, 400);
        assert.equal(await sent.conn.waitClosed(), true, 'the server kept the connection open');
        sent.conn.destroy();
      });
    });

    it('refuses a request with two Host headers: 400, OpenAI error body, connection closed, nothing forwarded', async () => {
      let response: RawResponse | undefined;
      await assertNotForwarded(async () => {
        const sent = await rawRequest(
          t.url,
          `POST /v1/completions HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n${COMPLETION}`,
        );
        response = sent.response;
        assert.equal(response.status, 400);
        assert.equal(await sent.conn.waitClosed(), true, 'the server kept the connection open');
        sent.conn.destroy();
      });
      assertOpenAiError(response!, 'bad_framing');
    });

    it('never forwards a request smuggled behind two Content-Length headers (0 and the smuggled length)', async () => {
      const smuggled = `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: ${len}\r\n\r\n${COMPLETION}`;
      await assertNotForwarded(async () => {
        const conn = await RawConnection.open(t.url);
        await conn.write(
          `POST /v1/models HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: 0\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
        );
        assert.equal(await conn.waitClosed(), true, 'the server kept the connection open');
        assertOnlyARefusal(conn);
        conn.destroy();
      });
    });

    it('closes the connection after a framing refusal even with more requests pipelined behind it', async () => {
      await assertNotForwarded(async () => {
        const conn = await RawConnection.open(t.url);
        const next = `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: ${len}\r\n\r\n${COMPLETION}`;
        await conn.write(`GET /v1/models HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n${next}${next}`);
        assert.equal(await conn.waitClosed(), true, 'the server kept the connection open');
        assertOnlyARefusal(conn);
        conn.destroy();
      });
    });

    it('serves a new connection normally after refusing a malformed request', async () => {
      const bad = await rawRequest(
        t.url,
        `GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n`,
      );
      assert.equal(bad.response.status, 400);
      await bad.conn.waitClosed();
      bad.conn.destroy();
      const { response, conn } = await rawRequest(
        t.url,
        'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n',
      );
      conn.destroy();
      assert.equal(response.status, 200);
      const models = JSON.parse(response.body.toString('utf8')) as { data?: unknown[] };
      assert.ok(Array.isArray(models.data));
    });

    it('forwards a valid chunked request body with identical bytes', async () => {
      const body = randomBytes(40_000);
      const expected = createHash('sha256').update(body).digest('hex');
      const head =
        'POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n';
      const conn = await RawConnection.open(t.url);
      // Odd chunk sizes, and the head and body in separate writes, so the body spans several reads.
      await conn.write(head);
      await conn.write(chunked(body, 4093));
      const response = await conn.readResponse();
      conn.destroy();
      assert.equal(response.status, 200, response.body.toString());
      const echo = JSON.parse(response.body.toString('utf8')) as {
        method: string;
        body_length: number;
        body_sha256: string;
        headers: [string, string][];
      };
      assert.equal(echo.method, 'POST');
      assert.equal(echo.body_length, body.length);
      assert.equal(echo.body_sha256, expected);
      const names = echo.headers.map(([n]) => n.toLowerCase());
      assert.ok(
        !names.includes('transfer-encoding') || !names.includes('content-length'),
        'the node got both framing headers',
      );
    });

    it('keeps the connection open after a valid chunked request and serves the next one on it', async () => {
      const conn = await RawConnection.open(t.url);
      await conn.write(
        `POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(Buffer.from('abc'), 2).toString('latin1')}`,
      );
      const first = await conn.readResponse();
      assert.equal(first.status, 200);
      await conn.write('GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n');
      const second = await conn.readResponse();
      conn.destroy();
      assert.equal(second.status, 200);
      assert.equal(conn.closed, false);
    });

    it('refuses a declared Content-Length above max_body_bytes with 413 (uWS keeps the connection, reading the body to drop it)', async () => {
      await assertNotForwarded(async () => {
        const { response, conn } = await rawRequest(
          t.url,
          `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: ${MAX_BODY + 1}\r\n\r\n${COMPLETION}`,
        );
        assert.equal(response.status, 413);
        if (engine.pipelining === 0) assert.equal(conn.closed, false, 'uWS closed the connection');
        else assert.equal(await conn.waitClosed(), true, 'the server kept the connection open');
        conn.destroy();
        assertOpenAiError(response, 'request_too_large');
      });
    });

    it("gives a refusal the client's x-request-id, or a new one", async () => {
      const head = `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: ${MAX_BODY + 1}\r\n`;
      const echoed = await rawRequest(t.url, `${head}x-request-id: client-id-42\r\n\r\n`);
      echoed.conn.destroy();
      assert.equal(echoed.response.status, 413);
      assert.equal(rawHeader(echoed.response, 'x-request-id'), 'client-id-42');
      const fresh = await rawRequest(t.url, `${head}\r\n`);
      fresh.conn.destroy();
      assert.equal(fresh.response.status, 413);
      assert.match(rawHeader(fresh.response, 'x-request-id') ?? '', /^\S{8,}$/);
    });

    it('accepts a body of exactly max_body_bytes', async () => {
      const body = randomBytes(MAX_BODY);
      const conn = await RawConnection.open(t.url);
      await conn.write(
        `POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: ${MAX_BODY}\r\n\r\n`,
      );
      await conn.write(body);
      const response = await conn.readResponse();
      conn.destroy();
      assert.equal(response.status, 200, response.body.toString());
      const echo = JSON.parse(response.body.toString('utf8')) as { body_length: number; body_sha256: string };
      assert.equal(echo.body_length, MAX_BODY);
      assert.equal(echo.body_sha256, createHash('sha256').update(body).digest('hex'));
    });

    it('refuses a chunked body that grows past max_body_bytes with 413 and closes the connection', async () => {
      await assertNotForwarded(async () => {
        const conn = await RawConnection.open(t.url);
        await conn.write(
          'POST /debug/echo HTTP/1.1\r\nHost: sluice.test\r\nTransfer-Encoding: chunked\r\n\r\n',
        );
        // Everything but the terminating chunk: the limit is crossed before the body could end.
        // (uWS answers at the body's end, reading the rest to drop it: the terminating chunk.)
        const body = chunked(randomBytes(MAX_BODY + 1000), 8192);
        await conn.write(body.subarray(0, body.length - 5)).catch(() => undefined);
        if (engine.pipelining === 0) await conn.write(body.subarray(body.length - 5));
        const response = await conn.readResponse();
        assert.equal(response.status, 413);
        assert.equal(await conn.waitClosed(), true, 'the server kept the connection open');
        conn.destroy();
        assertOpenAiError(response, 'request_too_large');
      });
    });

    it('refuses request headers larger than max_header_bytes with 431 and an OpenAI error body', async () => {
      await assertNotForwarded(async () => {
        const big = 'x'.repeat(MAX_HEADER + 100);
        const { response, conn } = await rawRequest(
          t.url,
          `POST /v1/completions HTTP/1.1\r\nHost: sluice.test\r\nX-Padding: ${big}\r\nContent-Length: ${len}\r\n\r\n${COMPLETION}`,
        );
        conn.destroy();
        assert.equal(response.status, 431);
        const parsed = JSON.parse(response.body.toString('utf8')) as {
          error: { message: string; type: string; param: unknown; code: string };
        };
        assert.equal(parsed.error.type, 'invalid_request_error');
        assert.equal(parsed.error.param, null);
        assert.equal(parsed.error.code, 'request_headers_too_large');
      });
    });

    it('accepts request headers just under max_header_bytes', async () => {
      const { response, conn } = await rawRequest(
        t.url,
        `GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nX-Padding: ${'x'.repeat(MAX_HEADER - 200)}\r\n\r\n`,
      );
      conn.destroy();
      assert.equal(response.status, 200);
    });
  });
