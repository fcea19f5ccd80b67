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
  let h = FNV_OFFSET | 0;
  const n = s.length;
  for (let i = 0; i < n; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      h = fnvByte(h, c);
      continue;
    }
    if (c < 0x800) {
      h = fnvByte(h, 0xc0 | (c >> 6));
      h = fnvByte(h, 0x80 | (c & 0x3f));
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < n ? s.charCodeAt(i + 1) : 0;
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i++;
        h = fnvByte(h, 0xf0 | (cp >> 18));
        h = fnvByte(h, 0x80 | ((cp >> 12) & 0x3f));
        h = fnvByte(h, 0x80 | ((cp >> 6) & 0x3f));
        h = fnvByte(h, 0x80 | (cp & 0x3f));
        continue;
      }
      c = 0xfffd;
    }
    h = fnvByte(h, 0xe0 | (c >> 12));
    h = fnvByte(h, 0x80 | ((c >> 6) & 0x3f));
    h = fnvByte(h, 0x80 | (c & 0x3f));
  }
  return h;
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
  return stableHash32(s).toString(16).padStart(8, '0');
}
