/**
 * Property tests of the SSE pieces: the proxy's first-event scan (`proxy/lifecycle/sse-first-event.ts`)
 * finds the first event line at the same byte whatever the chunking, and only there; the load
 * tester's client parser (`loadtest/client/sse-parser.ts`) gives back exactly the events that were
 * written, whatever the line endings, comments, other fields, characters and chunk boundaries.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SSE_EVENT_FOUND, SSE_LINE_START, scanSseForEvent } from '../../proxy/lifecycle/sse-first-event.js';
import { SseParser } from '../../loadtest/client/sse-parser.js';
import { FUZZ_TIMEOUT_MS, fuzzParams } from './fuzz-runs.js';

/** Splits `bytes` at the given cut points (any order, duplicates allowed). */
function split(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const c of [...at, bytes.length]) {
    out.push(bytes.subarray(prev, c));
    prev = c;
  }
  return out;
}

/** Bytes an SSE stream is made of, weighted towards line ends, colons and field names. */
const sseByte = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(0x0a, 0x0d, 0x3a, 0x20) },
  { weight: 2, arbitrary: fc.constantFrom(...Buffer.from('data')) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 255 }) },
);

/** Where the first event line starts: a byte after a line end (or the first), not CR/LF/':'. */
function firstEventAt(b: Uint8Array): number {
  for (let i = 0; i < b.length; i++) {
    const atLineStart = i === 0 || b[i - 1] === 0x0a || b[i - 1] === 0x0d;
    const c = b[i]!;
    if (atLineStart && c !== 0x0a && c !== 0x0d && c !== 0x3a) return i;
  }
  return -1;
}

interface Written {
  /** Data lines of each event, as written. */
  events: string[][];
  bytes: Uint8Array;
}

const lineEnd = fc.constantFrom('\n', '\r\n', '\r');
/** Text of a data line or comment: anything but CR and LF, any Unicode. */
const lineText = fc.string({ maxLength: 12, unit: 'grapheme' }).map((s) => s.replace(/[\r\n]/g, ''));

/** An SSE stream of events, each with data lines, comments and other fields, random line ends. */
const stream: fc.Arbitrary<Written> = fc
  .array(
    fc.record({
      data: fc.array(lineText, { minLength: 1, maxLength: 3 }),
      extras: fc.array(
        fc.oneof(
          lineText.map((t) => `: ${t}`),
          fc.constantFrom('event: x', 'id: 7', 'retry: 10'),
        ),
        {
          maxLength: 2,
        },
      ),
      ends: fc.array(lineEnd, { minLength: 8, maxLength: 8 }),
    }),
    { maxLength: 6 },
  )
  .map((evs) => {
    let text = '';
    for (const e of evs) {
      const lines = [...e.extras, ...e.data.map((d) => `data: ${d}`)];
      let last = '';
      lines.forEach((l, i) => {
        last = e.ends[i % 7]!;
        text += l + last;
      });
      // The blank line that ends the event. After a CR, a lone LF would make one CRLF line end.
      const blank = e.ends[7]!;
      text += last === '\r' && blank === '\n' ? '\r\n' : blank;
    }
    return { events: evs.map((e) => e.data), bytes: new TextEncoder().encode(text) };
  });

describe('SSE scanning and parsing (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  it('finds the first event line in the chunk that holds its first byte, whatever the chunking', () => {
    fc.assert(
      fc.property(fc.array(sseByte, { maxLength: 60 }), fc.array(fc.nat(), { maxLength: 6 }), (raw, cuts) => {
        const bytes = Uint8Array.from(raw);
        const want = firstEventAt(bytes);
        let state = SSE_LINE_START;
        let offset = 0;
        let foundIn = -1;
        for (const chunk of split(bytes, cuts)) {
          const s = scanSseForEvent(chunk, state);
          if (s === SSE_EVENT_FOUND) {
            foundIn = offset;
            assert.ok(
              want >= offset && want < offset + chunk.length,
              `found in the chunk at ${offset}, first event at ${want}`,
            );
            break;
          }
          state = s;
          offset += chunk.length;
        }
        if (want < 0) assert.equal(foundIn, -1, 'no event line, nothing found');
        else assert.notEqual(foundIn, -1, `the event line at ${want} was missed`);
      }),
      fuzzParams(),
    );
  });

  it('parses exactly the events written, whatever the line ends, fields and chunk boundaries', () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 8 }), (w, cuts) => {
        const out: string[] = [];
        const p = new SseParser((d) => out.push(d));
        for (const chunk of split(w.bytes, cuts)) p.push(chunk);
        p.end();
        assert.deepEqual(
          out,
          w.events.map((lines) => lines.join('\n')),
        );
      }),
      fuzzParams(),
    );
  });

  it('never throws on arbitrary bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.array(fc.nat(), { maxLength: 6 }), (bytes, cuts) => {
        const p = new SseParser(() => undefined);
        for (const chunk of split(bytes, cuts)) p.push(chunk);
        p.end();
        let s = SSE_LINE_START;
        for (const chunk of split(bytes, cuts)) if (s !== SSE_EVENT_FOUND) s = scanSseForEvent(chunk, s);
      }),
      fuzzParams(),
    );
  });
});
