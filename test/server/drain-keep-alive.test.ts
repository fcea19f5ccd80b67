/**
 * While Sluice drains, a keep-alive connection is closed after the answer that says
 * `Connection: close` (RFC 9112 §9.6): a client reusing its connection does not keep the drain
 * open until its deadline. On uWS, for an answer whose body arrives whole (most that are not
 * streamed); on the own engine, for every answer. A long stream holds the drain open meanwhile.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection, rawHeader } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice } from '../helpers/sluice.js';

const body = (stream: boolean): string =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream });
const post = (stream: boolean): string =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${Buffer.byteLength(body(stream))}\r\n\r\n${body(stream)}`;

describe('keep-alive connections during a drain', { timeout: 60_000 }, () => {
  for (const engine of ENGINES) {
    // On uWS a chunked answer cannot close its connection (see UwsDownstream.endCorked): it closes
    // when the drain ends, as a sized answer in several chunks does.
    for (const stream of engine.name === 'uws' ? [false] : [false, true]) {
      it(`${engine.name} listener: closes the connection after a ${stream ? 'streamed' : 'sized'} answer`, async () => {
        const fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
        const t = await startTestSluice(
          withListenerKeys(basicConfig([fleet.urls[0]!]), { pipelining: engine.pipelining }),
        );
        let drained: Promise<number> | null = null;
        const conn = await RawConnection.open(t.url);
        try {
          // A long stream keeps the drain going.
          const long = fetch(`${t.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '100' },
            body: JSON.stringify({
              model: 'm',
              messages: [{ role: 'user', content: 'hi' }],
              max_tokens: 20,
              stream: true,
            }),
          });
          await conn.write(post(stream));
          const first = await conn.readResponse();
          assert.equal(first.status, 200);
          await long;
          drained = t.sluice.drain(10_000);
          // The own engine closes an idle connection as the drain starts, before reading more; a
          // request already on its way is answered first, with `Connection: close`, as on uWS.
          await conn.write(post(stream));
          if (engine.name === 'uws') {
            const second = await conn.readResponse();
            assert.equal(second.status, 200);
            assert.equal(rawHeader(second, 'connection'), 'close');
          }
          assert.equal(await conn.waitClosed(2000), true, 'the connection was left open');
        } finally {
          conn.destroy();
          if (drained !== null) await drained;
          await t.close();
          await fleet.close();
        }
      });
    }
  }
});
