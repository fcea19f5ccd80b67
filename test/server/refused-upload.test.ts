/**
 * A body over `max_body_bytes` that the client is still sending when the 413 goes out: the client
 * reads the 413 (an HTTP client, as the OpenAI SDKs use, gets the status and its error body, not a
 * connection error it would retry), on both engines. The uWS engine reads and drops the rest of a
 * body up to four times the limit: a declared body is answered at once and the connection serves the
 * next request; a chunked one is answered at its end. Larger bodies close the connection.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const MAX_BODY = 4 << 20;
/** Over the limit, under the uWS engine's drop limit (4 × the limit). */
const UPLOAD = 3.5 * MAX_BODY;

/** A JSON chat body of `bytes` bytes. */
function chatBody(bytes: number): string {
  const head = '{"model":"m","messages":[{"role":"user","content":"';
  const tail = '"}],"max_tokens":1}';
  return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
}

function assertTooLarge(status: number, text: string): void {
  assert.equal(status, 413, text.slice(0, 300));
  const body = JSON.parse(text) as { error: { code: string; message: string } };
  assert.equal(body.error.code, 'request_too_large');
}

for (const engine of ENGINES) {
  describe(`an upload over max_body_bytes on the ${engine.name} engine`, { timeout: 60_000 }, () => {
    let fleet: SimFleet | undefined;
    let t: TestSluice | undefined;

    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      t = await startTestSluice(
        withListenerKeys(basicConfig(fleet.urls), {
          pipelining: engine.pipelining,
          max_body_bytes: MAX_BODY,
        }),
      );
    });

    after(async () => {
      await t?.close();
      await fleet?.close();
    });

    it('answers a client still sending a declared body with the 413, not a reset', async () => {
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${t!.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: chatBody(UPLOAD),
        });
        assertTooLarge(r.status, await r.text());
      }
      assert.equal(fleet!.nodes[0]!.stats().received, 0, 'nothing reached the node');
    });

    it('answers a client still sending a chunked body with the 413, not a reset', async () => {
      const payload = Buffer.from(chatBody(UPLOAD));
      let sent = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent >= payload.length) {
            controller.close();
            return;
          }
          const piece = payload.subarray(sent, sent + 64 * 1024);
          sent += piece.length;
          controller.enqueue(piece);
        },
      });
      const r = await fetch(`${t!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: stream,
        duplex: 'half',
      });
      assertTooLarge(r.status, await r.text());
      assert.equal(fleet!.nodes[0]!.stats().received, 0, 'nothing reached the node');
    });

    for (const framing of ['declared', 'chunked'] as const) {
      it(`lets a client that sends a whole ${framing} body before reading (as blocking HTTP clients do) read the 413`, async () => {
        // Half-open: the own engine ends its side after the 413 and reads on for a while.
        const conn = await RawConnection.open(t!.url, true);
        try {
          const body = Buffer.from(chatBody(UPLOAD));
          const framingHeader =
            framing === 'declared' ? `Content-Length: ${body.length}` : 'Transfer-Encoding: chunked';
          await conn.write(
            `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\n${framingHeader}\r\n\r\n`,
          );
          // Every write must be taken: a connection closed under the client fails its write.
          for (let at = 0; at < body.length; at += 256 * 1024) {
            const piece = body.subarray(at, at + 256 * 1024);
            await conn.write(
              framing === 'declared'
                ? piece
                : Buffer.concat([
                    Buffer.from(`${piece.length.toString(16)}\r\n`),
                    piece,
                    Buffer.from('\r\n'),
                  ]),
            );
          }
          if (framing === 'chunked') await conn.write('0\r\n\r\n');
          const refused = await conn.readResponse();
          assertTooLarge(refused.status, refused.body.toString());
        } finally {
          conn.destroy();
        }
      });
    }

    if (engine.name === 'uws') {
      it('answers a declared body at once and serves the next request on the connection', async () => {
        const conn = await RawConnection.open(t!.url);
        try {
          await conn.write(
            `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: ${UPLOAD}\r\n\r\n`,
          );
          const refused = await conn.readResponse();
          assertTooLarge(refused.status, refused.body.toString());
          await conn.write(Buffer.alloc(UPLOAD, 0x78));
          await conn.write('GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n');
          const next = await conn.readResponse();
          assert.equal(next.status, 200, next.body.toString());
          assert.equal(conn.closed, false);
        } finally {
          conn.destroy();
        }
      });

      it('closes the connection with the 413 for a declared body over four times the limit', async () => {
        const conn = await RawConnection.open(t!.url);
        try {
          await conn.write(
            `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Length: ${4 * MAX_BODY + 1}\r\n\r\n`,
          );
          const refused = await conn.readResponse();
          assertTooLarge(refused.status, refused.body.toString());
          assert.equal(await conn.waitClosed(), true, 'the connection stayed open');
        } finally {
          conn.destroy();
        }
      });
    }
  });
}
