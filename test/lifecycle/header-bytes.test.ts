/**
 * Header values are bytes: a node's response header with bytes of 0x80 and above (obs-text, such as
 * a UTF-8 file name or a latin1 byte) reaches the client byte for byte on both listener engines, for
 * sized and chunked bodies; a plugin's header value goes out as its latin1 bytes; and on Sluice's
 * own HTTP/1.1 engine request header bytes reach the node unchanged.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { rawRequest, type RawResponse } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN } from '../plugin/plugin-helpers.js';

const UTF8_NAME = Buffer.from('caf\u00e9.txt'); // 63 61 66 c3 a9 2e 74 78 74
const LATIN1_BYTE = Buffer.from([0x61, 0xe9, 0x62]);

/** The value of `name` in a raw response, as the bytes the client received. */
function bytesOf(r: RawResponse, name: string): Buffer {
  const v = r.headers.get(name)?.[0];
  assert.ok(v !== undefined, `${name} is missing`);
  return Buffer.from(v, 'latin1');
}

describe('header bytes', { timeout: 60_000 }, () => {
  let node: Server | null = null;
  let nodeUrl = '';
  /** The raw head of the last request the node received. */
  let lastHead = Buffer.alloc(0);
  const sockets = new Set<Socket>();

  before(async () => {
    node = createServer((s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      let buf = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        lastHead = buf.subarray(0, end);
        const chunked = lastHead.includes('/chunked');
        buf = Buffer.alloc(0);
        if (lastHead.includes('/ascii')) {
          s.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok');
          return;
        }
        const framing = chunked ? 'Transfer-Encoding: chunked\r\n' : 'Content-Length: 2\r\n';
        s.write(
          Buffer.concat([
            Buffer.from(
              'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Disposition: attachment; filename=',
            ),
            UTF8_NAME,
            Buffer.from('\r\nX-Raw: '),
            LATIN1_BYTE,
            Buffer.from(`\r\nX-Plain: ok\r\n${framing}\r\n${chunked ? '2\r\nok\r\n0\r\n\r\n' : 'ok'}`),
          ]),
        );
      });
    });
    await new Promise<void>((resolve) => node!.listen(0, '127.0.0.1', resolve));
    const addr = node.address();
    nodeUrl = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => (node === null ? resolve() : node.close(() => resolve())));
  });

  for (const engine of ENGINES) {
    describe(`${engine.name} listener`, () => {
      let t: TestSluice | null = null;
      before(async () => {
        t = await startTestSluice(
          withListenerKeys(basicConfig([nodeUrl]), { pipelining: engine.pipelining }),
        );
      });
      after(async () => {
        await t?.close();
      });

      for (const path of ['/v1/sized', '/v1/chunked']) {
        it(`passes a node's header bytes through unchanged (${path.slice(4)} body)`, async () => {
          const { response, conn } = await rawRequest(t!.url, `GET ${path} HTTP/1.1\r\nHost: sluice\r\n\r\n`);
          conn.destroy();
          assert.equal(response.status, 200);
          assert.deepEqual(
            bytesOf(response, 'content-disposition'),
            Buffer.concat([Buffer.from('attachment; filename='), UTF8_NAME]),
          );
          assert.deepEqual(bytesOf(response, 'x-raw'), LATIN1_BYTE);
          assert.equal(response.headers.get('x-plain')?.[0], 'ok');
          assert.equal(response.body.toString(), 'ok');
        });
      }
    });
  }

  it("Sluice's own engine forwards request header bytes unchanged", async () => {
    const t = await startTestSluice(withListenerKeys(basicConfig([nodeUrl]), { pipelining: 4 }));
    try {
      const req = Buffer.concat([
        Buffer.from('GET /v1/sized HTTP/1.1\r\nHost: sluice\r\nX-Name: '),
        UTF8_NAME,
        Buffer.from('\r\nX-Raw: '),
        LATIN1_BYTE,
        Buffer.from('\r\n\r\n'),
      ]);
      const { response, conn } = await rawRequest(t.url, req);
      conn.destroy();
      assert.equal(response.status, 200);
      assert.ok(
        lastHead.includes(Buffer.concat([Buffer.from('x-name: '), UTF8_NAME, Buffer.from('\r\n')])),
        lastHead.toString('latin1'),
      );
      assert.ok(
        lastHead.includes(Buffer.concat([Buffer.from('x-raw: '), LATIN1_BYTE, Buffer.from('\r\n')])),
        lastHead.toString('latin1'),
      );
    } finally {
      await t.close();
    }
  });

  describe("a plugin's response header", () => {
    function pluginConfig(label: string, pipelining: number): string {
      const plugins = `plugins:\n  - name: probe\n    use: ${PROBE_PLUGIN}\n    options: { label: ${JSON.stringify(label)} }\n`;
      return withListenerKeys(basicConfig([nodeUrl], plugins, { route: '    plugins: [probe]' }), {
        pipelining,
      });
    }

    for (const engine of ENGINES) {
      it(`goes out as latin1 bytes on the ${engine.name} engine`, async () => {
        const t = await startTestSluice(pluginConfig('caf\u00e9', engine.pipelining));
        try {
          // The node's own headers are ASCII on this path: only the plugin's value holds a byte above 0x7f.
          const { response, conn } = await rawRequest(
            t.url,
            'GET /v1/ascii HTTP/1.1\r\nHost: sluice\r\n\r\n',
          );
          conn.destroy();
          assert.equal(response.status, 200);
          assert.equal(response.headers.get('content-disposition'), undefined, 'the ASCII answer');
          assert.deepEqual(bytesOf(response, 'x-probe'), Buffer.from([0x63, 0x61, 0x66, 0xe9]));
        } finally {
          await t.close();
        }
      });
    }

    it('is refused when it holds a character above U+00FF (no byte to be)', async () => {
      const t = await startTestSluice(pluginConfig('\u20ac5', 0));
      try {
        const { response, conn } = await rawRequest(t.url, 'GET /v1/sized HTTP/1.1\r\nHost: sluice\r\n\r\n');
        conn.destroy();
        assert.equal(response.headers.get('x-probe'), undefined);
        assert.ok(response.status >= 500, `status ${response.status}`);
      } finally {
        await t.close();
      }
    });
  });
});
