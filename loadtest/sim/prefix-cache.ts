/**
 * A node's prefix cache: an LRU of KV blocks keyed by chained hashes of a prompt's leading blocks, as
 * in vLLM's automatic prefix caching. It only answers "how many leading tokens are already computed";
 * what a hit saves in time is the engine's business.
 */

import { CHARS_PER_TOKEN } from './outputs.js';

/**
 * Keys of the whole blocks of `text`, block i keyed by a hash of characters [0, (i+1) × blockChars),
 * so a key identifies a block *and* everything before it. A trailing partial block gets no key.
 * Two independent 32-bit lanes (FNV-1a and a multiply-xorshift) folded into one 53-bit integer:
 * cheap enough for long prompts at load-test rates, collisions negligible at cache sizes.
 */
export function blockKeys(text: string, blockTokens: number): number[] {
  const blockChars = blockTokens * CHARS_PER_TOKEN;
  const blocks = Math.floor(text.length / blockChars);
  const keys = new Array<number>(blocks);
  let h1 = 0x811c9dc5;
  let h2 = 0x9747b28c;
  for (let b = 0; b < blocks; b++) {
    const end = (b + 1) * blockChars;
    for (let i = b * blockChars; i < end; i++) {
      const c = text.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995);
      h2 ^= h2 >>> 15;
    }
    keys[b] = (h1 >>> 0) * 0x200000 + ((h2 >>> 0) & 0x1fffff);
  }
  return keys;
}

/**
 * LRU of block keys with a capacity in tokens. A Map keeps recency: the first entry is the least
 * recently used. Blocks of one prompt are touched last-to-first so that eviction takes a chain's tail
 * before its head (a missing head block would make every later block of the chain unreachable).
 */
export class PrefixCache {
  private readonly blocks = new Map<number, true>();
  private capacityBlocks: number;

  /** `blockTokens` tokens per block; `capacityTokens` is the initial size limit. */
  constructor(
    readonly blockTokens: number,
    capacityTokens: number,
  ) {
    this.capacityBlocks = Math.floor(capacityTokens / blockTokens);
  }

  /** Tokens currently cached (whole blocks). */
  get tokens(): number {
    return this.blocks.size * this.blockTokens;
  }

  /**
   * Number of leading blocks among `keys[0..limit)` present in the cache; they become most recently
   * used. Returns a count of blocks, not tokens.
   */
  match(keys: readonly number[], limit: number): number {
    const n = Math.min(limit, keys.length);
    let hit = 0;
    while (hit < n && this.blocks.has(keys[hit] as number)) hit++;
    this.touch(keys, hit);
    return hit;
  }

  /** Inserts (or refreshes) blocks `keys[0..count)`, then evicts down to capacity. */
  insert(keys: readonly number[], count: number): void {
    this.touch(keys, Math.min(count, keys.length));
    this.evict();
  }

  /** Changes the capacity (the pool left over by running sequences) and evicts down to it. */
  resize(capacityTokens: number): void {
    this.capacityBlocks = Math.max(0, Math.floor(capacityTokens / this.blockTokens));
    this.evict();
  }

  /** Drops every block (a restarted node has an empty cache). */
  clear(): void {
    this.blocks.clear();
  }

  private touch(keys: readonly number[], count: number): void {
    for (let i = count - 1; i >= 0; i--) {
      const k = keys[i] as number;
      this.blocks.delete(k);
      this.blocks.set(k, true);
    }
  }

  private evict(): void {
    const it = this.blocks.keys();
    while (this.blocks.size > this.capacityBlocks) {
      const next = it.next();
      if (next.done === true) break;
      this.blocks.delete(next.value);
    }
  }
}
