/**
 * Finding the first event of an SSE body: comment and blank lines before it are keep-alives, and a
 * line may be split across chunks anywhere.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SSE_EVENT_FOUND, SSE_LINE_START, scanSseForEvent } from '../../proxy/lifecycle/sse-first-event.js';

/** Feeds `chunks` in order; the index of the chunk where the first event starts, or -1. */
function firstEventChunk(chunks: readonly string[]): number {
  let state = SSE_LINE_START;
  for (let i = 0; i < chunks.length; i++) {
    state = scanSseForEvent(Buffer.from(chunks[i]!), state);
    if (state === SSE_EVENT_FOUND) return i;
  }
  return -1;
}

describe('first SSE event', () => {
  it('finds a data line at the start of the first chunk', () => {
    assert.equal(firstEventChunk(['data: {"choices":[]}\n\n']), 0);
  });

  it('skips comment and blank lines sent as keep-alives', () => {
    assert.equal(firstEventChunk([': ping\n\n', '\r\n', ':\n', 'data: x\n\n']), 3);
    assert.equal(firstEventChunk([': ping\n\n', ': ping\n\n']), -1);
  });

  it('counts any field line as the start of an event (event:, id:)', () => {
    assert.equal(firstEventChunk([': hello\n', 'event: message\n', 'data: x\n\n']), 1);
  });

  it('follows a comment line split across chunks', () => {
    assert.equal(firstEventChunk([': keep', '-alive', '\n', 'data: x\n']), 3);
    assert.equal(firstEventChunk([': keep-alive', '\r', '\ndata: x']), 2);
  });

  it('finds an event that starts after a comment inside the same chunk', () => {
    assert.equal(firstEventChunk([': ping\ndata: x\n\n']), 0);
  });

  it('treats an empty chunk as nothing', () => {
    assert.equal(scanSseForEvent(new Uint8Array(0), SSE_LINE_START), SSE_LINE_START);
  });
});
