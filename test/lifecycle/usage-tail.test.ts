/**
 * Reading the token usage a node reported from the last response chunks, as the session does to
 * reconcile a tenant's token pre-debit: newest chunk first, a usage object cut across two chunks,
 * and the fallbacks when counts are missing.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BodyTail, parseUsageTokens, TAIL_BYTES } from '../../proxy/lifecycle/usage-tail.js';

const b = (s: string): Buffer => Buffer.from(s, 'latin1');

describe('usage tail', () => {
  it('reads total_tokens from the newest chunk that holds a usage object', () => {
    const older = b('data: {"usage":{"total_tokens":5}}\n\n');
    const newest = b(
      'data: {"choices":[],"usage":{"prompt_tokens":3,"total_tokens":12}}\n\ndata: [DONE]\n\n',
    );
    assert.equal(parseUsageTokens(older, null, newest), 12);
  });

  it('reads a usage object cut between two chunks', () => {
    assert.equal(
      parseUsageTokens(null, b('{"id":"x","usage":{"prompt_to'), b('kens":4,"total_tokens":9}}')),
      9,
    );
    assert.equal(parseUsageTokens(b('{"usage":{"total_'), b('tokens":30}}'), b('\n')), 30);
  });

  it('reads a usage object whose key is cut by a chunk boundary (found by the fuzzer)', () => {
    assert.equal(parseUsageTokens(null, b('data: {"choices":[],"us'), b('age":{"total_tokens":9}}\n\n')), 9);
    assert.equal(
      parseUsageTokens(b('{"id":"x","usage'), b('"'), b(':{"prompt_tokens":4,"completion_tokens":3}}')),
      7,
    );
    // A missing chunk in between is no boundary: the key runs on into the next chunk there is.
    assert.equal(parseUsageTokens(b('{"u'), null, b('sage":{"total_tokens":12}}')), 12);
    // A newer usage object wins over one cut in an older chunk.
    assert.equal(
      parseUsageTokens(b('{"usa'), b('ge":{"total_tokens":1}}'), b('{"usage":{"total_tokens":2}}')),
      2,
    );
  });

  it('adds prompt and completion tokens when total_tokens is absent', () => {
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"prompt_tokens":7,"completion_tokens":2}}')), 9);
  });

  it('answers -1 without a usage object, or when the newest one holds no count', () => {
    assert.equal(parseUsageTokens(null, null, null), -1);
    assert.equal(parseUsageTokens(b('{"a":1}'), b('data: x\n\n'), b('data: [DONE]\n\n')), -1);
    assert.equal(parseUsageTokens(b('{"usage":{"total_tokens":5}}'), null, b('{"usage":null}')), -1);
  });

  it('reads a count of ten or more digits, a fraction or an exponent as no count (a broken node cannot lock a tenant out)', () => {
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"total_tokens":99999999999999999999999}}')), -1);
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"total_tokens":1234567890}}')), -1);
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"total_tokens":5.5}}')), -1);
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"total_tokens":1e9}}')), -1);
    assert.equal(parseUsageTokens(null, null, b('{"usage":{"total_tokens":123456789}}')), 123456789);
    assert.equal(
      parseUsageTokens(
        null,
        null,
        b('{"usage":{"total_tokens":1e99,"prompt_tokens":3,"completion_tokens":4}}'),
      ),
      7,
    );
  });
});

/** Streams `chunks` through a BodyTail as the session does and reads the usage at the end. */
function streamed(chunks: readonly Buffer[]): number {
  let tail: BodyTail | null = null;
  let newest: Buffer | null = null;
  for (const c of chunks) {
    if (newest !== null) (tail ??= new BodyTail()).keep(newest);
    newest = c;
  }
  return tail === null ? parseUsageTokens(null, null, newest) : tail.tokens(newest);
}

const USAGE_EVENT =
  'data: {"id":"c","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":60,"total_tokens":100}}\n\n';

describe('body tail', () => {
  it('reads a usage event followed by keep-alive comments and [DONE] in chunks of their own', () => {
    const pings = Array.from({ length: 12 }, () => b(': ping\n\n'));
    assert.equal(
      streamed([b('data: {"choices":[{"delta":{}}]}\n\n'), b(USAGE_EVENT), ...pings, b('data: [DONE]\n\n')]),
      100,
    );
  });

  it('reads a usage event cut into one-byte chunks', () => {
    const bytes = [...b(`${USAGE_EVENT}data: [DONE]\n\n`)].map((x) => Buffer.from([x]));
    assert.equal(streamed(bytes), 100);
  });

  it('reads the last usage when the ring wrapped, whatever the chunk sizes', () => {
    const filler = b(`data: {"choices":[{"delta":{"content":"${'x'.repeat(300)}"}}]}\n\n`);
    const early = b('data: {"choices":[],"usage":{"total_tokens":7}}\n\n');
    for (const cut of [1, 7, 64, 333, TAIL_BYTES - 1, TAIL_BYTES, TAIL_BYTES + 5]) {
      const body = Buffer.concat([
        early,
        filler,
        filler,
        filler,
        b(USAGE_EVENT),
        b(': ping\n\n'),
        b('data: [DONE]\n\n'),
      ]);
      const chunks: Buffer[] = [];
      for (let i = 0; i < body.length; i += cut) chunks.push(body.subarray(i, i + cut));
      assert.equal(streamed(chunks), 100, `chunks of ${cut} bytes`);
    }
  });

  it('keeps a bounded window: a usage more than TAIL_BYTES before the newest chunk is not read', () => {
    const after = b(`: ${'p'.repeat(TAIL_BYTES)}\n\n`);
    assert.equal(streamed([b(USAGE_EVENT), after, b('data: [DONE]\n\n')]), -1);
    // The newest chunk is kept whole, beside the window.
    assert.equal(streamed([b(USAGE_EVENT), b(': ping\n\n'), after]), 100);
  });

  it('reads a body of one chunk without a ring', () => {
    assert.equal(streamed([b(USAGE_EVENT)]), 100);
    assert.equal(streamed([b('{"ok":true}')]), -1);
  });
});
