/**
 * Property tests of the usage-tail scanner (`proxy/lifecycle/usage-tail.ts`), which reconciles a
 * tenant's token charge from the last response chunks: a usage object anywhere in the last three
 * chunks is read whatever the chunk boundaries cut (its key included), the latest one wins, and no
 * input makes it throw or return anything but -1 or a count under a billion.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseUsageTokens } from '../../proxy/lifecycle/usage-tail.js';
import { FUZZ_TIMEOUT_MS, fuzzParams } from './fuzz-runs.js';

const count = fc.integer({ min: 0, max: 999_999_999 });
const ws = fc.constantFrom('', ' ', '  ', '\n', '\t');

/** A usage object with random key order and spacing; `total` absent sometimes. */
const usage = fc
  .record({ p: count, q: count, t: fc.option(count, { nil: null }), order: fc.boolean(), s: ws })
  .map(({ p, q, t, order, s }) => {
    const fields = [`"prompt_tokens"${s}:${s}${p}`, `"completion_tokens":${s}${q}`];
    if (t !== null) fields.push(`"total_tokens"${s}:${t}`);
    if (order) fields.reverse();
    return { text: `"usage"${s}:${s}{${s}${fields.join(`,${s}`)}${s}}`, want: t ?? p + q };
  });

/** Text around a usage object: JSON or SSE noise without the word usage. */
const noise = fc.string({ maxLength: 200, unit: 'binary-ascii' }).map((s) => s.replace(/usage/g, 'u_age'));

/** Three consecutive chunks covering `text`, cut at two random points (chunks may be empty: null). */
function threeChunks(text: string, x: number, y: number): [Buffer | null, Buffer | null, Buffer | null] {
  const b = Buffer.from(text, 'latin1');
  const [i, j] = [x % (b.length + 1), y % (b.length + 1)].sort((m, n) => m - n) as [number, number];
  const part = (s: number, e: number): Buffer | null => (e > s ? b.subarray(s, e) : null);
  return [part(0, i), part(i, j), part(j, b.length)];
}

describe('usage tail (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  it('reads a usage object however the chunk boundaries cut it, key included', () => {
    fc.assert(
      fc.property(
        noise,
        usage,
        fc.string({ maxLength: 40 }).map((s) => s.replace(/usage/g, '')),
        fc.nat(),
        fc.nat(),
        (pre, u, post, x, y) => {
          const chunks = threeChunks(`${pre}{"id":"x",${u.text}}${post}`, x, y);
          assert.equal(parseUsageTokens(...chunks), u.want);
        },
      ),
      fuzzParams(),
    );
  });

  it('takes the latest of two usage objects', () => {
    fc.assert(
      fc.property(usage, noise, usage, fc.nat(), fc.nat(), (older, mid, newer, x, y) => {
        const chunks = threeChunks(`data: {${older.text}}\n\n${mid}data: {${newer.text}}\n\n`, x, y);
        assert.equal(parseUsageTokens(...chunks), newer.want);
      }),
      fuzzParams(),
    );
  });

  it('answers -1 or a count below two billion (two nine-digit counts) for any bytes, and never throws', () => {
    const text = fc.oneof(
      fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
      fc
        .array(
          fc.constantFrom(
            '"usage"',
            ':',
            '{',
            '}',
            '"total_tokens"',
            '"prompt_tokens"',
            ' ',
            '12',
            '9999999999',
            '1e5',
            '-3',
            ',',
          ),
          { maxLength: 40 },
        )
        .map((p) => Buffer.from(p.join(''))),
    );
    fc.assert(
      fc.property(
        fc.option(text, { nil: null }),
        fc.option(text, { nil: null }),
        fc.option(text, { nil: null }),
        (a, b, c) => {
          const n = parseUsageTokens(a, b, c);
          assert.ok(n === -1 || (Number.isInteger(n) && n >= 0 && n < 2_000_000_000), `got ${n}`);
        },
      ),
      fuzzParams(),
    );
  });
});
