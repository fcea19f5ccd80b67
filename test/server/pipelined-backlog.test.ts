/**
 * Sluice's own engine with pipelining: answers queued behind an unfinished one never stall it. A
 * stream answered first while the complete, larger-than-the-write-buffer answer of the request
 * pipelined behind it waits in Sluice must still flow to its end; and when the client half-closes,
 * the answers abandoned behind the stream stop counting against its buffer.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { withListenerKeys } from '../helpers/engines.js';
import { RawConnection } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const WRITE_BUFFER_BYTES = 4096;
/** A target no route matches, long enough that its 404 (which quotes it) outgrows the write buffer. */
const LONG_MISS = `/miss/${'x'.repeat(2 * WRITE_BUFFER_BYTES)}`;

function streamRequest(maxTokens = 24): string {
  const body = JSON.stringify({
    model: 'sim-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: maxTokens,
    stream: true,
  });
  return (
    `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\n` +
    `x-sim-chunk-delay-ms: 20\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

describe('pipelined answers queued behind a stream', { timeout: 60_000 }, () => {
  let fleet: SimFleet;
  let t: TestSluice | null = null;
  const open: RawConnection[] = [];

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(
      withListenerKeys(
        basicConfig([fleet.urls[0]!]).replace('    match: {}', '    match: { path_prefix: /v1/ }'),
        { pipelining: 8, write_buffer_bytes: WRITE_BUFFER_BYTES, max_url_bytes: 4 * WRITE_BUFFER_BYTES },
      ),
    );
  });

  after(async () => {
    for (const c of open) c.destroy();
    await t?.close();
    await fleet?.close();
  });

  it('streams the first answer to its end while a large second answer waits behind it', async () => {
    const c = await RawConnection.open(t!.url);
    open.push(c);
    await c.write(`${streamRequest()}GET ${LONG_MISS} HTTP/1.1\r\nHost: sluice.test\r\n\r\n`);
    const first = await c.readResponse(10_000);
    assert.equal(first.status, 200);
    assert.match(first.body.toString(), /data: \[DONE\]/);
    const second = await c.readResponse(5000);
    assert.equal(second.status, 404);
    assert.ok(second.body.length > WRITE_BUFFER_BYTES, `a 404 of ${second.body.length} bytes`);
  });

  it('resumes a large stream held behind one that ends, and counts no failure', async () => {
    // The first stream ends inside the node client's callback; the second, paused behind it at the
    // write buffer, must be resumed outside it (resuming one node connection's parser inside
    // another's callback is refused by undici: the stream stalled until idle_ms, and the first
    // node was charged a failure).
    const node = t!.sluice.current.pools.get('gpu')!.members[0]!.node;
    const failures = node.failures;
    const c = await RawConnection.open(t!.url);
    open.push(c);
    await c.write(`${streamRequest()}${streamRequest(2000).replace('x-sim-chunk-delay-ms: 20\r\n', '')}`);
    const first = await c.readResponse(10_000);
    assert.equal(first.status, 200);
    assert.match(first.body.toString(), /data: \[DONE\]/);
    const second = await c.readResponse(5000);
    assert.equal(second.status, 200);
    assert.ok(second.body.length > 16 * WRITE_BUFFER_BYTES, `a stream of ${second.body.length} bytes`);
    assert.match(second.body.toString(), /data: \[DONE\]/);
    assert.equal(node.failures - failures, 0);
  });

  it('streams on to a client that half-closed, with the answers behind the stream abandoned', async () => {
    const c = await RawConnection.open(t!.url);
    open.push(c);
    const stalled = streamRequest().replace('x-sim-chunk-delay-ms: 20', 'x-sim-stall-ms: 3000');
    await c.write(`${streamRequest()}${stalled}GET ${LONG_MISS} HTTP/1.1\r\nHost: sluice.test\r\n\r\n`);
    await c.waitForText('data: ', 5000);
    c.socket.end();
    const first = await c.readResponse(10_000);
    assert.equal(first.status, 200);
    assert.match(first.body.toString(), /data: \[DONE\]/);
    assert.ok(await c.waitClosed(3000), 'the connection stayed open after the stream');
    assert.equal(c.pending.length, 0, 'an abandoned answer was sent');
  });
});
