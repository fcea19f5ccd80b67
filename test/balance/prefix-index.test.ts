/**
 * The per-node prefix index and the prompt block hashes it stores: a conversation's next turn
 * matches every full block of the turn before; the index answers how many leading blocks a node
 * holds, forgets the oldest generation past its capacity, keeps what is used, and never grows.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PrefixIndex } from '../../proxy/balance/prefix-index.js';
import { PROMPT_BLOCK_CHARS, blockHashes, promptBlockHashes } from '../../proxy/balance/prompt-blocks.js';

const text = (seed: string, chars: number): string =>
  seed.repeat(Math.ceil(chars / seed.length)).slice(0, chars);

describe('prompt block hashes', () => {
  it('hash only full blocks, each covering all text before it', () => {
    const a = blockHashes(text('abc ', PROMPT_BLOCK_CHARS * 3 + 10));
    assert.equal(a.length, 3);
    const b = blockHashes(text('abc ', PROMPT_BLOCK_CHARS * 2) + text('xyz ', PROMPT_BLOCK_CHARS));
    assert.deepEqual([...b.slice(0, 2)], [...a.slice(0, 2)]);
    assert.notEqual(b[2], a[2]);
    assert.ok(a.every((h) => h !== 0));
  });

  it('let the next turn of a chat match every full block of the turn before', () => {
    const system = { role: 'system', content: text('You are helpful. ', 1500) };
    const turn1 = { messages: [system, { role: 'user', content: text('question one ', 900) }] };
    const turn2 = {
      messages: [
        ...turn1.messages,
        { role: 'assistant', content: text('answer ', 700) },
        { role: 'user', content: 'and then?' },
      ],
    };
    const h1 = promptBlockHashes(turn1);
    const h2 = promptBlockHashes(turn2);
    assert.ok(h1.length >= 9 && h2.length > h1.length);
    assert.deepEqual([...h2.slice(0, h1.length)], [...h1]);
    assert.equal(promptBlockHashes({ input: 'short' }).length, 0);
    assert.equal(promptBlockHashes(null).length, 0);
  });
});

describe('PrefixIndex', () => {
  it('counts the leading blocks a node holds', () => {
    const ix = new PrefixIndex(1000);
    const a = blockHashes(text('abc ', PROMPT_BLOCK_CHARS * 10));
    const b = blockHashes(text('abc ', PROMPT_BLOCK_CHARS * 6) + text('zzz ', PROMPT_BLOCK_CHARS * 6));
    assert.equal(ix.matchedBlocks(a), 0);
    ix.record(a);
    assert.equal(ix.matchedBlocks(a), 10);
    assert.equal(ix.matchedBlocks(b), 6);
    assert.equal(ix.matchedBlocks(a.slice(0, 3)), 3);
    assert.equal(ix.matchedBlocks(new Uint32Array(0)), 0);
  });

  it('forgets the oldest blocks past its capacity and keeps the ones still used', () => {
    const ix = new PrefixIndex(48); // generations of 32 blocks
    const old = blockHashes(text('old ', PROMPT_BLOCK_CHARS * 20));
    const kept = blockHashes(text('kept ', PROMPT_BLOCK_CHARS * 10));
    ix.record(old);
    ix.record(kept);
    for (let i = 0; i < 6; i++) {
      ix.record(blockHashes(text(`filler ${i} `, PROMPT_BLOCK_CHARS * 10)));
      ix.record(kept); // used again: touched into the current generation
    }
    assert.equal(ix.matchedBlocks(old), 0, 'evicted');
    assert.equal(ix.matchedBlocks(kept), 10, 'kept by use');
    assert.ok(ix.size <= 2 * ix.generationBlocks);
  });

  it('has a fixed memory size, whatever it is fed', () => {
    const ix = new PrefixIndex(6250);
    const before = ix.memoryBytes;
    assert.equal(before, 2 * 16384 * 4); // generations of 4,167 blocks, tables at most half full
    for (let i = 0; i < 200; i++) ix.record(blockHashes(text(`prompt ${i} `, PROMPT_BLOCK_CHARS * 50)));
    assert.equal(ix.memoryBytes, before);
    assert.ok(ix.size <= 2 * ix.generationBlocks);
  });
});
