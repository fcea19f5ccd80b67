/**
 * The client's SSE parser: events split anywhere, any line ending (a CR at the very end of the
 * stream included), multi-line data, UTF-8 across chunks.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SseParser } from '../../loadtest/client/sse-parser.js';

function parseChunks(chunks: (string | Uint8Array)[]): string[] {
  const out: string[] = [];
  const p = new SseParser((d) => out.push(d));
  for (const c of chunks) p.push(typeof c === 'string' ? new TextEncoder().encode(c) : c);
  p.end();
  return out;
}

describe('SSE parser', () => {
  it('yields each event once, whatever the chunk boundaries', () => {
    const text = 'data: {"a":1}\n\ndata: {"b":2}\n\n: comment\n\ndata: [DONE]\n\n';
    const whole = parseChunks([text]);
    assert.deepEqual(whole, ['{"a":1}', '{"b":2}', '[DONE]']);
    for (let cut = 1; cut < text.length; cut++) {
      assert.deepEqual(parseChunks([text.slice(0, cut), text.slice(cut)]), whole, `cut at ${cut}`);
    }
  });

  it('accepts CRLF and CR line ends, joins multi-line data and skips other fields', () => {
    assert.deepEqual(parseChunks(['event: x\r\nid: 1\r\ndata: a\r\ndata:b\r\n\r', '\ndata: c\r\rdata\n\n']), [
      'a\nb',
      'c',
      '',
    ]);
  });

  it('delivers an event ended by a CR that is the last byte of the stream (found by the fuzzer)', () => {
    assert.deepEqual(parseChunks(['data: a\r\r']), ['a']);
    assert.deepEqual(parseChunks(['data: a\n', '\r']), ['a']);
    const out: string[] = [];
    const p = new SseParser((d) => out.push(d));
    p.push(new TextEncoder().encode('data: b\r\r'));
    assert.deepEqual(out, [], 'a CR at the end of a chunk may still be followed by an LF');
    p.end();
    assert.deepEqual(out, ['b'], 'at the end of the stream it cannot');
  });

  it('drops an unfinished event at the end of the stream', () => {
    assert.deepEqual(parseChunks(['data: a\n\ndata: b\n']), ['a']);
    assert.deepEqual(parseChunks(['data: a\n\ndata: b']), ['a']);
  });

  it('decodes a multi-byte character split between chunks', () => {
    const bytes = new TextEncoder().encode('data: é€\n\n');
    assert.deepEqual(parseChunks([bytes.slice(0, 7), bytes.slice(7, 9), bytes.slice(9)]), ['é€']);
  });
});
