/**
 * Stable 32-bit string hashes for placement decisions that must agree across processes, machines
 * and restarts (ring control points, affinity keys). Pure functions of the string's UTF-8 bytes:
 * no seeds drawn at run time, no dependence on the JS engine's own string hashing.
 */

/** FNV-1a 32-bit offset basis. */
const FNV_OFFSET = 0x811c9dc5;
/** FNV-1a 32-bit prime. */
const FNV_PRIME = 0x01000193;

/** Feeds one byte into an FNV-1a state. */
function fnvByte(h: number, byte: number): number {
  return Math.imul(h ^ byte, FNV_PRIME);
}

/**
 * FNV-1a (32-bit) of the UTF-8 encoding of `s`, as an unsigned integer. Lone surrogates are
 * encoded as U+FFFD, like `TextEncoder`, so every string has exactly one byte sequence. Matches the
 * published FNV-1a test vectors (`fnv1a32('a') === 0xe40c292c`).
 */
export function fnv1a32(s: string): number {
  return fnv1a(s) >>> 0;
}

/**
 * The FNV-1a state after `s` as a signed 32-bit integer. The hashes are computed in signed form and
 * made unsigned only at the end: a function that returns an unsigned value of 2^31 or more boxes it
 * (a heap allocation) whenever the optimiser does not inline it.
 */
function fnv1a(s: string): number {
  // HOT
  return fnvRange(FNV_OFFSET | 0, s, 0, s.length);
}

/**
 * Feeds the UTF-8 encoding of `s[start, end)` into the FNV-1a state `h`. A surrogate pair inside
 * the range is one code point; a lone surrogate (including a high one that ends the range) is
 * U+FFFD.
 */
function fnvRange(h: number, s: string, start: number, end: number): number {
  // HOT
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      h = fnvByte(h, c);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < end) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
        h = fnvCodePoint(h, 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00));
        continue;
      }
    }
    h = fnvCodePoint(h, c >= 0xd800 && c <= 0xdfff ? 0xfffd : c);
  }
  return h;
}

/** Feeds the UTF-8 encoding of code point `cp` (at least U+0080) into `h`. */
function fnvCodePoint(h: number, cp: number): number {
  if (cp < 0x800) {
    h = fnvByte(h, 0xc0 | (cp >> 6));
    return fnvByte(h, 0x80 | (cp & 0x3f));
  }
  if (cp < 0x10000) {
    h = fnvByte(h, 0xe0 | (cp >> 12));
    h = fnvByte(h, 0x80 | ((cp >> 6) & 0x3f));
    return fnvByte(h, 0x80 | (cp & 0x3f));
  }
  h = fnvByte(h, 0xf0 | (cp >> 18));
  h = fnvByte(h, 0x80 | ((cp >> 12) & 0x3f));
  h = fnvByte(h, 0x80 | ((cp >> 6) & 0x3f));
  return fnvByte(h, 0x80 | (cp & 0x3f));
}

/**
 * `stableHash32` of text that arrives in pieces, without joining them: after `add(a)`, `add(b)`,
 * `hash32()` equals `stableHash32(a + b)`, a surrogate pair split between two pieces included.
 * Reusable: `reset()` starts the next text. Allocates nothing.
 */
export class StableHashStream {
  private h = FNV_OFFSET | 0;
  /** A high surrogate that ended the last piece and waits for its low half; 0 for none. */
  private high = 0;

  reset(): void {
    this.h = FNV_OFFSET | 0;
    this.high = 0;
  }

  /** Feeds `s[0, end)`. */
  add(s: string, end: number = s.length): void {
    // HOT
    if (end <= 0) return;
    let h = this.h;
    let start = 0;
    if (this.high !== 0) {
      const c = s.charCodeAt(0);
      if (c >= 0xdc00 && c <= 0xdfff) {
        h = fnvCodePoint(h, 0x10000 + ((this.high - 0xd800) << 10) + (c - 0xdc00));
        start = 1;
      } else {
        h = fnvCodePoint(h, 0xfffd);
      }
      this.high = 0;
    }
    const last = s.charCodeAt(end - 1);
    // A high surrogate at the end may pair with the next piece's first character: held back.
    if (end > start && last >= 0xd800 && last <= 0xdbff) {
      h = fnvRange(h, s, start, end - 1);
      this.high = last;
    } else {
      h = fnvRange(h, s, start, end);
    }
    this.h = h;
  }

  /** The hash of everything fed since the last reset (a pending high surrogate counts as U+FFFD). */
  hash32(): number {
    const h = this.high === 0 ? this.h : fnvCodePoint(this.h, 0xfffd);
    return mix(h) >>> 0;
  }
}

/**
 * The murmur3 32-bit finaliser: a bijection on 32-bit integers that makes every input bit affect
 * every output bit. FNV-1a alone spreads a change in the last character mostly into the low bits;
 * ring positions are compared on all 32 bits, so they go through this first.
 */
export function mix32(h: number): number {
  return mix(h) >>> 0;
}

/** `mix32` in signed form (see `fnv1a`). */
function mix(h: number): number {
  // HOT
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/**
 * The hash used for ring positions and affinity keys: `mix32(fnv1a32(s))`, an unsigned 32-bit
 * integer. Changing it remaps every key, so the consistent-hash golden test pins it.
 */
export function stableHash32(s: string): number {
  // HOT
  return mix(fnv1a(s)) >>> 0;
}

/**
 * The top 26 bits of `stableHash32(s)` (`stableHash32(s) >>> 6`): a small integer, never boxed,
 * for lookups that must not allocate (the consistent-hash ring's key hash).
 */
export function stableHash26(s: string): number {
  // HOT
  return mix(fnv1a(s)) >>> 6;
}

/** `stableHash32(s)` as 8 lowercase hex digits: a short, stable stand-in for a long string. */
export function stableHashHex(s: string): string {
  return hex8(stableHash32(s));
}

/** An unsigned 32-bit integer as 8 lowercase hex digits. */
export function hex8(n: number): string {
  // HOT (a prefix affinity key per request). Four table lookups: `toString(16)` is a runtime call,
  // and strings this short are built flat.
  return HEX2[n >>> 24]! + HEX2[(n >>> 16) & 255]! + HEX2[(n >>> 8) & 255]! + HEX2[n & 255]!;
}

/** Every byte as two lowercase hex digits. */
const HEX2: readonly string[] = Array.from({ length: 256 }, (_, i) => (i < 16 ? '0' : '') + i.toString(16));
