/**
 * The stable string hash: published FNV-1a vectors, UTF-8 encoding (checked against Buffer's), the
 * finaliser, and pinned values (a change here remaps every affinity key in every deployment).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  fnv1a32,
  hex8,
  mix32,
  stableHash26,
  stableHash32,
  stableHashHex,
  StableHashStream,
} from '../../proxy/balance/stable-hash.js';

/** FNV-1a over bytes, the textbook way. */
function fnvBytes(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h >>> 0;
}

describe('stable hash', () => {
  it('matches the published FNV-1a 32-bit test vectors', () => {
    assert.equal(fnv1a32(''), 0x811c9dc5);
    assert.equal(fnv1a32('a'), 0xe40c292c);
    assert.equal(fnv1a32('foobar'), 0xbf9cf968);
  });

  it('hashes the UTF-8 bytes of any string, lone surrogates included', () => {
    const samples = [
      'héllo',
      '日本語のプロンプト',
      'emoji 🚀 here',
      'lone \ud800 high',
      'lone \udc00 low',
      'end \ud83d',
    ];
    for (const s of samples) assert.equal(fnv1a32(s), fnvBytes(Buffer.from(s, 'utf8')), s);
  });

  it('hashes ASCII runs of every length and position among other characters alike', () => {
    // The ASCII path takes four characters at a time: runs that end, start or break anywhere
    // inside a group of four, at every string length up to 40.
    const alphabet = ['a', 'Z', '7', ' ', '\u007f', 'é', 'ß', '€', '日', '🚀', '\ud800', '\udc00'];
    let seed = 12345;
    const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
    for (let len = 0; len <= 40; len++) {
      for (let round = 0; round < 25; round++) {
        let s = '';
        while (s.length < len) {
          const k = next() % 4 === 0 ? alphabet[next() % alphabet.length]! : alphabet[next() % 5]!;
          s += k;
        }
        assert.equal(fnv1a32(s), fnvBytes(Buffer.from(s, 'utf8')), JSON.stringify(s));
      }
    }
  });

  it('hashes text fed in pieces as the pieces joined, wherever they split, surrogate pairs included', () => {
    const alphabet = ['a', ' ', 'é', '€', '日', '🚀', '\ud800', '\udc00', '\udbff', '\udfff'];
    let seed = 777;
    const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
    const stream = new StableHashStream();
    for (let round = 0; round < 3000; round++) {
      const pieces: string[] = [];
      const count = next() % 5;
      for (let p = 0; p < count; p++) {
        let piece = '';
        const len = next() % 6;
        while (piece.length < len) piece += alphabet[next() % alphabet.length]!;
        pieces.push(piece);
      }
      // Each piece may be fed only up to a cut, as the prefix key cuts its last piece.
      const cuts = pieces.map((p) => (next() % 3 === 0 ? next() % (p.length + 1) : p.length));
      stream.reset();
      for (let p = 0; p < pieces.length; p++) stream.add(pieces[p]!, cuts[p]);
      const joined = pieces.map((p, i) => p.slice(0, cuts[i])).join('');
      assert.equal(stream.hash32(), stableHash32(joined), JSON.stringify({ pieces, cuts }));
    }
    // A pair split across two pieces is one code point, as in the joined text.
    stream.reset();
    stream.add('x\ud83d');
    stream.add('\ude80y');
    assert.equal(stream.hash32(), stableHash32('x🚀y'));
    assert.notEqual(stream.hash32(), stableHash32('x\ufffd\ufffdy'));
  });

  it('mixes so that neighbouring inputs land far apart', () => {
    assert.equal(mix32(0), 0);
    let differing = 0;
    for (let i = 0; i < 1000; i++) {
      const x = stableHash32(`node#${i}`) ^ stableHash32(`node#${i + 1}`);
      differing += x.toString(2).replace(/0/g, '').length;
    }
    // About half of the 32 bits differ on average.
    assert.ok(differing / 1000 > 14 && differing / 1000 < 18, String(differing / 1000));
  });

  it('keeps its values across versions (pinned)', () => {
    assert.equal(stableHash32('http://10.0.0.1:8000#0'), stableHash32('http://10.0.0.1:8000#0'));
    assert.equal(stableHashHex('session-1'), PINNED_SESSION_1);
    assert.equal(stableHashHex(''), PINNED_EMPTY);
  });

  it('writes 8 hex digits, zero-padded', () => {
    for (let i = 0; i < 200; i++) assert.match(stableHashHex(`k${i}`), /^[0-9a-f]{8}$/);
  });

  it('writes any unsigned 32-bit integer as its 8 hex digits, zero-padded', () => {
    for (const n of [
      0, 1, 0xf, 0x10, 0xff, 0x100, 0xabcdef, 0x0fffffff, 0x10000000, 0x80000000, 0xfffffffe, 0xffffffff,
    ])
      assert.equal(hex8(n), n.toString(16).padStart(8, '0'));
    for (let i = 0; i < 2000; i++) {
      const n = stableHash32(`n${i}`);
      assert.equal(hex8(n), n.toString(16).padStart(8, '0'));
    }
  });

  it('gives the top 26 bits of the 32-bit hash as a non-negative integer below 2^26', () => {
    for (const text of ['', 'a', 'session-42', 'é€😀', 'x'.repeat(1000)]) {
      const h = stableHash26(text);
      assert.equal(h, stableHash32(text) >>> 6, text);
      assert.ok(Number.isInteger(h) && h >= 0 && h < 2 ** 26, String(h));
    }
  });
});

/** murmur3-fmix32(FNV-1a(UTF-8)), cross-checked with an independent Python computation. */
const PINNED_SESSION_1 = '23b81b8b';
const PINNED_EMPTY = 'ab3e7c0b';
