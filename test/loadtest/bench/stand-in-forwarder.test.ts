/**
 * The benchmark's stand-in node and bare forwarder, over real loopback sockets: the fixed answers,
 * the delay, and a paced SSE stream that the forwarder passes on as it comes rather than buffered.
 */

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startBareForwarder, type BareForwarder } from '../../../loadtest/bench/bare-forwarder.js';
import {
  CHAT_BODY,
  COMPLETION_BODY,
  STREAM_BODY,
  STREAM_CHUNKS,
} from '../../../loadtest/bench/chat-fixtures.js';
import { startStandIn, type StandIn } from '../../../loadtest/bench/stand-in-node.js';

/** Gap between two writes of the paced stand-in, ms. */
const GAP_MS = 10;

interface Received {
  status: number;
  headers: Headers;
  text: string;
  /** Arrival time of each read, ms since the request was sent. */
  reads: number[];
}

async function post(port: number, body: string): Promise<Received> {
  const t0 = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  const reads: number[] = [];
  const parts: Uint8Array[] = [];
  const reader = r.body!.getReader() as ReadableStreamDefaultReader<Uint8Array>;
  for (;;) {
    const next = await reader.read();
    if (next.done) break;
    reads.push(performance.now() - t0);
    parts.push(next.value);
  }
  return { status: r.status, headers: r.headers, text: Buffer.concat(parts).toString('utf8'), reads };
}

function events(text: string): string[] {
  return text.split('\n\n').filter((e) => e.startsWith('data: '));
}

describe('benchmark stand-in node and bare forwarder', { timeout: 60_000 }, () => {
  let fast: StandIn | undefined;
  let slow: StandIn | undefined;
  let paced: StandIn | undefined;
  let viaFast: BareForwarder | undefined;
  let viaPaced: BareForwarder | undefined;

  before(async () => {
    fast = await startStandIn({ port: 0, delayMs: 0, chunkGapMs: 0 });
    slow = await startStandIn({ port: 0, delayMs: 50, chunkGapMs: 0 });
    paced = await startStandIn({ port: 0, delayMs: 0, chunkGapMs: GAP_MS });
    viaFast = await startBareForwarder({
      port: 0,
      upstream: `http://127.0.0.1:${fast.port}`,
      connections: 4,
    });
    viaPaced = await startBareForwarder({
      port: 0,
      upstream: `http://127.0.0.1:${paced.port}`,
      connections: 4,
    });
  });

  after(async () => {
    await viaFast?.close();
    await viaPaced?.close();
    fast?.close();
    slow?.close();
    paced?.close();
  });

  it('answers the chat POST with the fixed completion, directly and through the forwarder', async () => {
    for (const port of [fast!.port, viaFast!.port]) {
      const r = await post(port, CHAT_BODY);
      assert.equal(r.status, 200);
      assert.equal(r.text, COMPLETION_BODY);
      assert.equal(r.headers.get('content-type'), 'application/json');
      assert.equal(r.headers.get('content-length'), String(Buffer.byteLength(COMPLETION_BODY)));
    }
  });

  it('waits the configured delay before answering', async () => {
    const r = await post(slow!.port, CHAT_BODY);
    assert.equal(r.status, 200);
    assert.ok(r.reads[0]! >= 45, `answered after ${r.reads[0]} ms`);
  });

  it('streams the fixed SSE answer when the body asks for it, through the forwarder too', async () => {
    for (const port of [fast!.port, viaFast!.port]) {
      const r = await post(port, STREAM_BODY);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-type'), 'text/event-stream');
      const ev = events(r.text);
      assert.equal(ev.length, STREAM_CHUNKS + 1);
      assert.equal(ev.at(-1), 'data: [DONE]');
    }
  });

  it('forwards a paced stream chunk by chunk as the node writes it, not at the end', async () => {
    const r = await post(viaPaced!.port, STREAM_BODY);
    assert.equal(events(r.text).length, STREAM_CHUNKS + 1);
    // The node spends (STREAM_CHUNKS - 1) gaps on the stream; a buffering proxy would deliver it in
    // one read at the end. Reads must spread over most of that time.
    const span = r.reads.at(-1)! - r.reads[0]!;
    assert.ok(r.reads.length >= STREAM_CHUNKS / 2, `${r.reads.length} reads`);
    assert.ok(span >= (STREAM_CHUNKS - 1) * GAP_MS * 0.5, `first to last read: ${span} ms`);
  });
});
