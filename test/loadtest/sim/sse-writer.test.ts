/**
 * The SSE writer against a real socket and a slow reader: it stops writing while the socket is
 * congested, loses nothing, keeps order, and ends with [DONE].
 */

import assert from 'node:assert/strict';
import { createServer, request, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { SseWriter } from '../../../loadtest/sim/sse-writer.js';
import { pollUntil } from './sim-test-helpers.js';

describe('SseWriter', () => {
  it('holds events while the socket is congested and delivers all of them in order', async () => {
    const count = 20000;
    const payload = 'x'.repeat(1000);
    let writesWhileCongested = 0;
    let congestedEpisodes = 0;
    const server = createServer((_req, res: ServerResponse) => {
      const writer = new SseWriter(res, -1);
      let congested = false;
      const write = res.write.bind(res) as (chunk: string, cb?: () => void) => boolean;
      res.write = ((chunk: string, cb?: () => void) => {
        if (congested) writesWhileCongested++;
        const ok = write(chunk, cb);
        if (!ok && !congested) {
          congested = true;
          congestedEpisodes++;
          res.once('drain', () => (congested = false));
        }
        return ok;
      }) as typeof res.write;
      for (let i = 0; i < count; i++) writer.event(`{"i":${i},"p":"${payload}"}`);
      writer.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const req = request({ port, host: '127.0.0.1', path: '/' }, (res) => {
          res.pause();
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
          res.on('error', reject);
          // Resume only once the server has run into backpressure.
          pollUntil('the server to see backpressure', () => congestedEpisodes > 0).then(
            () => res.resume(),
            reject,
          );
        });
        req.on('error', reject);
        req.end();
      });
      const events = body.split('\n\n').filter((e) => e !== '');
      assert.equal(events.length, count + 1);
      assert.equal(events.at(-1), 'data: [DONE]');
      events
        .slice(0, -1)
        .forEach((e, i) => assert.ok(e.startsWith(`data: {"i":${i},`), `event ${i} out of order`));
      assert.ok(congestedEpisodes > 0, 'the test never produced backpressure');
      assert.equal(writesWhileCongested, 0);
    } finally {
      server.close();
    }
  });
});
