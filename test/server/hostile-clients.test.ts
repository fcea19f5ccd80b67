/**
 * The hostile-client table over raw sockets, held against both downstream engines: smuggling and
 * ambiguous framing, malformed heads, bad chunked bodies, odd request targets and methods, and
 * limits. The simulated node counts every request it receives, so each row proves what reached
 * it. Sluice's own engine (`pipelining` > 0) answers every row as RFC 9112 asks; where the uWS
 * engine answers differently (its own HTML page, silence until its timeout, or accepting), the row
 * says so, and docs/security.md lists the same deviations with their mitigation.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { RawConnection, rawHeader, type RawResponse } from '../helpers/raw-http.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/**
 * What a row expects:
 * - a refusal: `status` with an OpenAI error body of `code` (or uWS's own HTML page when `page`),
 *   the connection closed (unless `open`), nothing forwarded, and a request pipelined behind it
 *   never served;
 * - `silent`: no byte within the window, nothing forwarded (uWS closes only at its ~10 s timeout);
 * - `served`: forwarded once and answered with `status` (default 200) on a connection kept open.
 */
type Expect =
  | { status: number; code?: string; page?: 'uws'; open?: true }
  | { served: true; status?: number; close?: boolean }
  | 'silent';

interface Row {
  name: string;
  /** The request bytes (latin1). */
  bytes: string;
  net: Expect;
  uws: Expect;
  /** Checks the served response (e.g. the headers the node received, echoed by /debug/echo). */
  check?: (r: RawResponse) => void;
  /** Sends the bytes in two packets, cut at this offset. */
  split?: number;
}

const BODY = '{"model":"m","prompt":"hi","max_tokens":1}';
const L = BODY.length;
const HEX = L.toString(16);
const MAX_HEADER_BYTES = 4096;
const MAX_HEADER_COUNT = 50;
const MAX_URL_BYTES = 2048;
const MAX_BODY = 65536;
/** How long a silent engine is watched, ms. */
const SILENCE_MS = 400;

const post = (fields: string, body = BODY, line = 'POST /debug/echo HTTP/1.1'): string =>
  `${line}\r\nHost: sluice.test\r\n${fields}\r\n${body}`;
const get = (fields = '', line = 'GET /debug/echo HTTP/1.1'): string =>
  `${line}\r\nHost: sluice.test\r\n${fields}\r\n`;
const chunkedPost = (chunks: string): string => post('Transfer-Encoding: chunked\r\n', chunks);

const bad = (code = 'bad_framing'): Expect => ({ status: 400, code });
const uwsPage = (status: number): Expect => ({ status, page: 'uws' });
const served: Expect = { served: true };

/** Asserts that the node received none of the headers in `names`. */
function echoedWithout(...names: string[]): (r: RawResponse) => void {
  return (r) => {
    const echo = JSON.parse(r.body.toString('utf8')) as { headers: [string, string][] };
    for (const [n, v] of echo.headers) {
      const name = n.toLowerCase();
      assert.ok(!names.includes(name), `the node received ${name}`);
      // The node's own client writes `connection: keep-alive`; the client's `Upgrade` token must not pass.
      if (name === 'connection') assert.doesNotMatch(v, /upgrade/i);
    }
  };
}

const ROWS: Row[] = [
  // Content-Length
  {
    name: 'Content-Length "5, 5" (a list)',
    bytes: post(`Content-Length: ${L}, ${L}\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'Content-Length with a plus sign',
    bytes: post(`Content-Length: +${L}\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  { name: 'Content-Length -1', bytes: post('Content-Length: -1\r\n'), net: bad(), uws: uwsPage(400) },
  {
    name: 'Content-Length in hex (0x2a)',
    bytes: post(`Content-Length: 0x${HEX}\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'Content-Length of 20 digits',
    bytes: post('Content-Length: 00000000000000000042\r\n'),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'two identical Content-Length headers',
    bytes: post(`Content-Length: ${L}\r\nContent-Length: ${L}\r\n`),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'two conflicting Content-Length headers',
    bytes: post(`Content-Length: ${L}\r\nContent-Length: ${L - 5}\r\n`),
    net: bad(),
    uws: bad(),
  },
  // Transfer-Encoding
  {
    name: 'Transfer-Encoding: gzip',
    bytes: post('Transfer-Encoding: gzip\r\n'),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'Transfer-Encoding: identity',
    bytes: post('Transfer-Encoding: identity\r\n'),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'Transfer-Encoding: gzip, chunked',
    bytes: chunkedPost(`${HEX}\r\n${BODY}\r\n0\r\n\r\n`).replace('chunked', 'gzip, chunked'),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'Transfer-Encoding: chunked, chunked',
    bytes: chunkedPost(`${HEX}\r\n${BODY}\r\n0\r\n\r\n`).replace('chunked', 'chunked, chunked'),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'two Transfer-Encoding headers',
    bytes: post(
      'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n',
      `${HEX}\r\n${BODY}\r\n0\r\n\r\n`,
    ),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'Transfer-Encoding and Content-Length together',
    bytes: post(`Content-Length: ${L}\r\nTransfer-Encoding: chunked\r\n`, `${HEX}\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'Transfer-Encoding on HTTP/1.0',
    bytes: post(
      'Transfer-Encoding: chunked\r\n',
      `${HEX}\r\n${BODY}\r\n0\r\n\r\n`,
      'POST /debug/echo HTTP/1.0',
    ),
    net: bad(),
    uws: uwsPage(505),
  },
  {
    name: 'Transfer-Encoding: Chunked (transfer codings are case-insensitive)',
    bytes: chunkedPost(`${HEX}\r\n${BODY}\r\n0\r\n\r\n`).replace('chunked', 'Chunked'),
    net: served,
    uws: served,
  },
  // Header syntax
  {
    name: 'obs-fold (a header line starting with a space)',
    bytes: get('X-A: a\r\n  folded\r\n'),
    net: bad(),
    uws: 'silent',
  },
  {
    name: 'whitespace between a header name and its colon',
    bytes: get('X-A : a\r\n'),
    net: bad(),
    uws: 'silent',
  },
  {
    name: 'whitespace before the colon of Content-Length',
    bytes: post(`Content-Length : ${L}\r\n`),
    net: bad(),
    uws: 'silent',
  },
  { name: 'a NUL byte in a header value', bytes: get('X-A: a\u0000b\r\n'), net: bad(), uws: 'silent' },
  { name: 'a bare CR in a header value', bytes: get('X-A: a\rb\r\n'), net: bad(), uws: 'silent' },
  {
    name: 'lines ending with a bare LF',
    bytes: 'GET /debug/echo HTTP/1.1\nHost: sluice.test\n\n',
    net: bad(),
    uws: uwsPage(505),
  },
  { name: 'a header name that is not a token', bytes: get('X(A): a\r\n'), net: bad(), uws: 'silent' },
  { name: 'an empty header name', bytes: get(': a\r\n'), net: bad(), uws: served },
  // Chunked bodies
  {
    name: 'a chunk size that is not hex',
    bytes: chunkedPost(`zz\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'a chunk size with 0x',
    bytes: chunkedPost(`0x${HEX}\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'a negative chunk size',
    bytes: chunkedPost(`-1\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'a chunk size of 20 hex digits',
    bytes: chunkedPost(`fffffffffffffffffff\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'whitespace after a chunk size without an extension',
    bytes: chunkedPost(`${HEX} \r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: served,
  },
  {
    name: 'chunk data not followed by CRLF',
    bytes: chunkedPost(`${HEX}\r\n${BODY}XX0\r\n\r\n`),
    net: bad(),
    uws: served,
  },
  {
    name: 'a chunk extension (valid)',
    bytes: chunkedPost(`${HEX};name=value\r\n${BODY}\r\n0\r\n\r\n`),
    net: served,
    uws: uwsPage(400),
  },
  {
    name: 'chunk extensions with a quoted value and whitespace (valid)',
    bytes: chunkedPost(`${HEX} ; a = "x \\"q" ;y\r\n${BODY}\r\n0;z=1\r\n\r\n`),
    net: served,
    uws: uwsPage(400),
  },
  {
    name: 'a chunk size line of 1,000 bytes (valid)',
    bytes: chunkedPost(`${HEX};a=${'x'.repeat(1000 - HEX.length - 3)}\r\n${BODY}\r\n0\r\n\r\n`),
    net: served,
    uws: uwsPage(400),
  },
  {
    name: 'a chunk extension of 60,000 bytes, the whole line in one packet',
    bytes: chunkedPost(`${HEX};a=${'x'.repeat(60_000)}\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: uwsPage(400),
  },
  {
    name: 'a chunk extension without a name (found by the fuzzer)',
    bytes: chunkedPost(`${HEX} ;\r\n${BODY}\r\n0\r\n\r\n`),
    net: bad(),
    uws: served,
  },
  {
    name: 'a chunk extension with an empty value or an open quote',
    bytes: chunkedPost(`${HEX};a=\r\n${BODY}\r\n0;b="x\r\n\r\n`),
    net: bad(),
    uws: 'silent',
  },
  {
    name: 'a trailer field after the last chunk (valid)',
    bytes: chunkedPost(`${HEX}\r\n${BODY}\r\n0\r\nX-Trailer: 1\r\n\r\n`),
    net: served,
    uws: uwsPage(505),
  },
  // Host
  {
    name: 'two Host headers',
    bytes: 'GET /debug/echo HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n',
    net: bad(),
    uws: bad(),
  },
  { name: 'no Host header', bytes: 'GET /debug/echo HTTP/1.1\r\n\r\n', net: bad(), uws: 'silent' },
  {
    name: 'a Host with userinfo (user@host)',
    bytes: 'GET /debug/echo HTTP/1.1\r\nHost: user@sluice.test\r\n\r\n',
    net: bad(),
    uws: bad(),
  },
  {
    name: 'a Host with a port that is not a number',
    bytes: 'GET /debug/echo HTTP/1.1\r\nHost: sluice.test:http\r\n\r\n',
    net: bad(),
    uws: bad(),
  },
  {
    name: 'a Host with a space',
    bytes: 'GET /debug/echo HTTP/1.1\r\nHost: sluice test\r\n\r\n',
    net: bad(),
    uws: bad(),
  },
  {
    name: 'an empty Host (allowed by RFC 9112 §3.2)',
    bytes: 'GET /debug/echo HTTP/1.1\r\nHost:\r\n\r\n',
    net: served,
    uws: served,
  },
  // Request line and target
  {
    name: 'an absolute-form target (served, its authority replaces Host)',
    bytes: get('', 'GET http://other.test/debug/echo HTTP/1.1'),
    net: served,
    uws: uwsPage(505),
  },
  {
    name: 'CONNECT',
    bytes: 'CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n',
    net: { status: 501, code: 'method_not_supported' },
    uws: uwsPage(505),
  },
  {
    name: 'a fragment in the target',
    bytes: get('', 'GET /debug/echo#frag HTTP/1.1'),
    net: bad(),
    uws: { served: true, status: 404 },
  },
  {
    name: 'a UTF-8 character in the target',
    bytes: get('', 'GET /debug/echo/caf\xc3\xa9 HTTP/1.1'),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'a byte above 0x7E in the query',
    bytes: get('', 'GET /debug/echo?q=\xff HTTP/1.1'),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'DEL (0x7F) in the target',
    bytes: get('', 'GET /debug/a\x7fb HTTP/1.1'),
    net: bad(),
    uws: bad(),
  },
  {
    name: 'a space inside the target',
    bytes: get('', 'GET /debug/ echo HTTP/1.1'),
    net: bad(),
    uws: uwsPage(505),
  },
  {
    name: 'two spaces after the method',
    bytes: get('', 'GET  /debug/echo HTTP/1.1'),
    net: bad(),
    uws: uwsPage(505),
  },
  {
    name: 'a method that is not a token',
    bytes: get('', 'G(T /debug/echo HTTP/1.1'),
    net: bad(),
    uws: { status: 400, code: 'invalid_request', open: true },
  },
  {
    name: 'HTTP/2.0 in the request line',
    bytes: get('', 'GET /debug/echo HTTP/2.0'),
    net: { status: 505, code: 'http_version_not_supported' },
    uws: uwsPage(505),
  },
  {
    name: 'HTTP/1.0 (served, connection closed after)',
    bytes: 'GET /debug/echo HTTP/1.0\r\n\r\n',
    net: { served: true, close: true },
    uws: uwsPage(505),
  },
  {
    name: 'a request line split across packets right after the method',
    bytes: get(),
    split: 4,
    net: served,
    uws: uwsPage(505),
  },
  {
    name: 'a request line split across packets inside the version',
    bytes: get(),
    split: 'GET /debug/echo HTTP/'.length,
    net: served,
    uws: uwsPage(505),
  },
  {
    name: 'an empty line before the request line (ignored, RFC 9112 §2.2)',
    bytes: `\r\n${get()}`,
    net: served,
    uws: 'silent',
  },
  // Upgrade and proxy credentials
  {
    name: 'Upgrade: websocket on an API route (served as HTTP/1.1, never forwarded)',
    bytes: get(
      'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n',
    ),
    net: served,
    uws: served,
    check: echoedWithout('upgrade'),
  },
  {
    name: 'Upgrade: h2c with HTTP2-Settings (served as HTTP/1.1, never forwarded)',
    bytes: get('Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n'),
    net: served,
    uws: served,
    check: echoedWithout('upgrade', 'http2-settings'),
  },
  {
    name: 'Proxy-Authorization (never forwarded)',
    bytes: get('Proxy-Authorization: Basic dTpw\r\n'),
    net: served,
    uws: served,
    check: echoedWithout('proxy-authorization'),
  },
  // Limits
  {
    name: `more header fields than max_header_count (${MAX_HEADER_COUNT})`,
    bytes: get(Array.from({ length: MAX_HEADER_COUNT + 5 }, (_, i) => `X-H${i}: v\r\n`).join('')),
    net: { status: 431, code: 'request_headers_too_large' },
    uws: { status: 431, code: 'request_headers_too_large' },
  },
  {
    name: 'more than 100 header fields',
    bytes: get(Array.from({ length: 120 }, (_, i) => `X-H${i}: v\r\n`).join('')),
    net: { status: 431, code: 'request_headers_too_large' },
    uws: uwsPage(431),
  },
  {
    name: 'header bytes over max_header_bytes',
    bytes: get(`X-Pad: ${'x'.repeat(MAX_HEADER_BYTES + 10)}\r\n`),
    net: { status: 431, code: 'request_headers_too_large' },
    uws: { status: 431, code: 'request_headers_too_large' },
  },
  {
    name: 'a target longer than max_url_bytes',
    bytes: get('', `GET /debug/echo?${'q'.repeat(MAX_URL_BYTES)} HTTP/1.1`),
    net: { status: 414, code: 'request_uri_too_long' },
    uws: { status: 414, code: 'request_uri_too_long' },
  },
  {
    name: 'a target longer than 64 KiB',
    bytes: get('', `GET /debug/echo?${'q'.repeat(70_000)} HTTP/1.1`),
    net: { status: 414, code: 'request_uri_too_long' },
    uws: uwsPage(431),
  },
  {
    name: 'a declared body over max_body_bytes',
    bytes: post(`Content-Length: ${MAX_BODY + 1}\r\n`),
    net: { status: 413, code: 'request_too_large' },
    // uWS reads and drops the declared body (up to 4 × the limit), keeping the connection.
    uws: { status: 413, code: 'request_too_large', open: true },
  },
  {
    name: 'a chunked body that grows past max_body_bytes',
    bytes: chunkedPost(`${(MAX_BODY + 1).toString(16)}\r\n${'z'.repeat(MAX_BODY + 1)}\r\n0\r\n\r\n`),
    net: { status: 413, code: 'request_too_large' },
    uws: { status: 413, code: 'request_too_large' },
  },
];

/** A valid request pipelined behind a refused one: it must never be served. */
const BEHIND = 'GET /debug/echo?behind HTTP/1.1\r\nHost: sluice.test\r\n\r\n';

function assertErrorBody(r: RawResponse, code: string): void {
  assert.match(rawHeader(r, 'content-type') ?? '', /^application\/json/, r.body.toString('latin1'));
  const parsed = JSON.parse(r.body.toString('utf8')) as { error?: { code?: string; type?: string } };
  assert.equal(parsed.error?.code, code, r.body.toString('latin1'));
  assert.equal(parsed.error?.type, 'invalid_request_error');
}

for (const engine of ENGINES) {
  describe(`hostile clients on the ${engine.name} engine`, { timeout: 120_000 }, () => {
    let fleet: SimFleet;
    let t: TestSluice;

    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      t = await startTestSluice(
        withListenerKeys(basicConfig(fleet.urls), {
          pipelining: engine.pipelining,
          max_body_bytes: MAX_BODY,
          max_header_bytes: MAX_HEADER_BYTES,
          max_header_count: MAX_HEADER_COUNT,
          max_url_bytes: MAX_URL_BYTES,
        }),
      );
    });

    after(async () => {
      await t?.close();
      await fleet?.close();
    });

    const received = (): number => fleet.nodes[0]!.stats().received;

    /** A valid request on a new connection; afterwards the node must have seen one request since `before`. */
    async function assertOnlyOneForwarded(before: number): Promise<void> {
      const ok = await fetch(`${t.url}/v1/models`);
      assert.equal(ok.status, 200);
      await ok.arrayBuffer();
      assert.equal(received() - before, 1, 'the node received a refused request or the one behind it');
    }

    for (const row of ROWS) {
      const expect = row[engine.name];
      const verdict =
        expect === 'silent'
          ? 'no answer, nothing forwarded'
          : 'served' in expect
            ? `forwarded and answered ${expect.status ?? 200}`
            : `${expect.status}${expect.page === 'uws' ? " (uWS's own page)" : ''}, ${expect.open === true ? 'connection kept' : 'connection closed'}, nothing forwarded`;
      it(`${row.name}: ${verdict}`, async () => {
        const before = received();
        const conn = await RawConnection.open(t.url);
        try {
          if (row.split === undefined) await conn.write(row.bytes);
          else {
            await conn.write(row.bytes.slice(0, row.split));
            await new Promise((r) => setTimeout(r, 50));
            // An engine that refused the first packet may have closed already.
            await conn.write(row.bytes.slice(row.split)).catch(() => undefined);
          }
          if (expect === 'silent') {
            await assert.rejects(conn.waitForData(SILENCE_MS), /timed out/, 'the engine answered');
            assert.equal(conn.pending.length, 0);
          } else if ('served' in expect) {
            const r = await conn.readResponse();
            assert.equal(r.status, expect.status ?? 200, r.body.toString('latin1'));
            row.check?.(r);
            if (expect.close === true)
              assert.equal(await conn.waitClosed(), true, 'the connection stayed open');
            else assert.equal(conn.closed, false, 'the connection was closed');
            assert.equal(received() - before, 1, 'the node did not receive the request exactly once');
            return;
          } else {
            const r = await conn.readResponse();
            assert.equal(r.status, expect.status, r.body.toString('latin1'));
            if (expect.page === 'uws') assert.match(r.body.toString('latin1'), /uWebSockets/);
            else assertErrorBody(r, expect.code ?? 'bad_framing');
            if (expect.open === true) assert.equal(conn.closed, false, 'the connection was closed');
            else assert.equal(await conn.waitClosed(), true, 'the connection stayed open');
          }
        } finally {
          conn.destroy();
        }
        // The same bytes with a valid request pipelined behind: at most the refusal comes back.
        // (A refusal that keeps the connection ends that request only; the next one is valid.)
        if (expect === 'silent' || expect.open !== true) {
          const behind = await RawConnection.open(t.url);
          try {
            await behind.write(row.bytes + BEHIND);
            if (expect === 'silent') await assert.rejects(behind.waitForData(SILENCE_MS), /timed out/);
            else assert.equal(await behind.waitClosed(), true, 'the connection stayed open');
            const text = behind.pending.toString('latin1');
            const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
            assert.ok(statuses.length <= 1, `answered ${statuses.length} requests: ${statuses.join(', ')}`);
            if (statuses.length === 1 && expect !== 'silent') assert.equal(statuses[0], expect.status);
          } finally {
            behind.destroy();
          }
        }
        await assertOnlyOneForwarded(before);
      });
    }

    it('drops a request whose client closes in the middle of its body: nothing forwarded', async () => {
      const before = received();
      const conn = await RawConnection.open(t.url);
      conn.socket.end(post(`Content-Length: ${L + 10}\r\n`), 'latin1');
      assert.equal(await conn.waitClosed(), true, 'the connection stayed open');
      assert.equal(conn.pending.length, 0);
      conn.destroy();
      await assertOnlyOneForwarded(before);
    });
  });
}
