/** The client's SSE parser: events split anywhere, any line ending, multi-line data, UTF-8 across chunks. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SseParser } from '../../loadtest/client/sse-parser.js';

function parseChunks(chunks: (string | Uint8Array)[]): string[] {
  const out: string[] = [];
  const p = new SseParser((d) => out.push(d));
  for (const c of chunks) p.push(typeof c === 'string' ? new TextEncoder().encode(c) : c);
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

  it('decodes a multi-byte character split between chunks', () => {
    const bytes = new TextEncoder().encode('data: é€\n\n');
    assert.deepEqual(parseChunks([bytes.slice(0, 7), bytes.slice(7, 9), bytes.slice(9)]), ['é€']);
  });
});
