/**
 * The per-node prefix index and the prompt block hashes it stores: a conversation's next turn
 * matches every full block of the turn before; the index answers how many leading blocks a node
 * holds, forgets the oldest generation past its capacity, keeps what is used, and never grows.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CHECKPOINT_BLOCKS, PrefixIndex } from '../../proxy/balance/prefix-index.js';
import { promptPrefix } from '../helpers/prompt-prefix.js';
import { Xorshift32 } from '../../proxy/balance/xorshift.js';
import {
  MAX_PROMPT_CHARS,
  PROMPT_BLOCK_CHARS,
  blockHashes,
  readPromptBlocks,
} from '../../proxy/balance/prompt-blocks.js';

const text = (seed: string, chars: number): string =>
  seed.repeat(Math.ceil(chars / seed.length)).slice(0, chars);

/**
 * What a search that looks at every block after the last held checkpoint finds, through `has`
 * alone: the whole prompt, else the run of held checkpoints from the first, then the last held of
 * the few blocks after it. The index's own search skips those blocks where no recorded prompt
 * ended (ENDS_FLAG) and must find the same.
 */
function plainMatch(ix: PrefixIndex, hashes: Int32Array): number {
  const n = hashes.length;
  if (n === 0) return 0;
  if (ix.has(hashes[n - 1]!)) return n;
  let base = 0; // blocks through the run of held checkpoints from the first
  while (base + CHECKPOINT_BLOCKS - 1 < n - 1 && ix.has(hashes[base + CHECKPOINT_BLOCKS - 1]!)) {
    base += CHECKPOINT_BLOCKS;
  }
  for (let i = Math.min(base + CHECKPOINT_BLOCKS - 1, n - 1) - 1; i >= base; i--) {
    if (ix.has(hashes[i]!)) return i + 1;
  }
  return base;
}

/**
 * The index's generations as two maps, the older one dropped whole at each change of generation:
 * what the index's tables must read as, whatever they do to drop a generation. Same recording
 * rules as `PrefixIndex.record` (checkpoints, last block, end flags, generations in blocks or
 * entries); a wrapping int32 clock.
 */
class GenerationsModel {
  current = new Map<number, { stamp: number; ends: boolean }>();
  previous = new Map<number, { stamp: number; ends: boolean }>();
  clock: number;
  private blocks = 0;

  constructor(
    private readonly ix: PrefixIndex,
    startClock: number,
  ) {
    this.clock = startClock | 0;
  }

  /** Stamp of `h` as a lookup finds it (the current generation first), or null. */
  stamp(h: number): number | null {
    return (this.current.get(h) ?? this.previous.get(h))?.stamp ?? null;
  }

  get size(): number {
    return this.current.size + this.previous.size;
  }

  record(hashes: Int32Array, matched: number): void {
    const n = hashes.length;
    if (n === 0) return;
    const at = matched > 0 && matched <= n ? this.current.get(hashes[matched - 1]!) : undefined;
    const from = at === undefined ? 0 : matched;
    this.clock = (this.clock + n - from) | 0;
    if (at !== undefined) at.stamp = this.clock;
    for (let i = from; i < n - 1; i++)
      if (i % CHECKPOINT_BLOCKS === CHECKPOINT_BLOCKS - 1) this.touch(hashes[i]!);
    if (from < n) this.touch(hashes[n - 1]!);
    if ((n - 1) % CHECKPOINT_BLOCKS !== CHECKPOINT_BLOCKS - 1 && n - 1 >= CHECKPOINT_BLOCKS) {
      const h = hashes[n - 2 - ((n - 1) % CHECKPOINT_BLOCKS)]!;
      const e = this.current.get(h) ?? this.previous.get(h);
      if (e !== undefined) e.ends = true;
    }
    this.blocks += n - from;
    if (this.blocks >= this.ix.generationBlocks) this.rotate();
  }

  private touch(h: number): void {
    const e = this.current.get(h);
    if (e !== undefined) e.stamp = this.clock;
    else {
      this.current.set(h, { stamp: this.clock, ends: false });
      if (this.current.size >= this.ix.generationEntries) this.rotate();
    }
  }

  private rotate(): void {
    this.previous = this.current;
    this.current = new Map();
    this.blocks = 0;
  }
}

/** A deterministic draw below `n` for traces. */
function random(seed: number): (below: number) => number {
  const x = new Xorshift32(seed);
  return (below) => x.nextUint32() % below;
}

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
    const h1 = readPromptBlocks(turn1).hashes;
    const h2 = readPromptBlocks(turn2).hashes;
    assert.ok(h1.length >= 9 && h2.length > h1.length);
    assert.deepEqual([...h2.slice(0, h1.length)], [...h1]);
    assert.equal(readPromptBlocks({ input: 'short' }).hashes.length, 0);
    assert.equal(readPromptBlocks(null).hashes.length, 0);
  });

  it('hash a body as they would hash its whole prompt text, without building it', () => {
    const bodies: unknown[] = [
      {
        messages: [
          { role: 'system', content: text('Be exact. ', 700) },
          { role: 'user', content: text('q ', 3000) },
        ],
      },
      {
        system: text('top-level system ', 500),
        messages: [
          {
            role: 'user',
            content: [{ type: 'text', text: text('part ', 900) }, { type: 'image_url' }, 'plain'],
          },
        ],
      },
      { prompt: text('a completion prompt ', 2000) },
      { prompt: Array.from({ length: 700 }, (_, i) => i) },
      { input: [{ role: 'user', content: text('responses api ', 1200) }], instructions: text('rules ', 400) },
      {
        messages: [
          { role: 'user', content: text('x', MAX_PROMPT_CHARS + 5000) },
          { role: 'user', content: 'more' },
        ],
      },
    ];
    for (const body of bodies) {
      assert.deepEqual(
        [...readPromptBlocks(body).hashes],
        [...blockHashes(promptPrefix(body, MAX_PROMPT_CHARS))],
      );
    }
  });

  it('count the conversation before the last message as its history', () => {
    const system = { role: 'system', content: text('sys ', 400) };
    const user = { role: 'user', content: text('first ', 800) };
    const last = { role: 'user', content: text('latest ', 1000) };
    const before = promptPrefix({ messages: [system, user] }, MAX_PROMPT_CHARS).length;
    assert.equal(readPromptBlocks({ messages: [system, user, last] }).historyTokens, Math.floor(before / 4));
    assert.equal(readPromptBlocks({ messages: [last] }).historyTokens, 0);
    assert.equal(readPromptBlocks({ prompt: text('p ', 2000) }).historyTokens, 0);
    // A conversation longer than the hashed bound: all that was read comes before the last message.
    const huge = { messages: [{ role: 'user', content: text('y', MAX_PROMPT_CHARS + 10) }, last] };
    assert.equal(readPromptBlocks(huge).historyTokens, MAX_PROMPT_CHARS / 4);
  });

  it('count the chat messages, and none for other bodies', () => {
    const m = (content: string): { role: string; content: string } => ({ role: 'user', content });
    assert.equal(readPromptBlocks({ messages: [m('a'), m('b'), m('c')] }).messages, 3);
    assert.equal(readPromptBlocks({ messages: [] }).messages, 0);
    assert.equal(readPromptBlocks({ prompt: 'a prompt' }).messages, 0);
    assert.equal(
      readPromptBlocks({ input: [m('a'), m('b')] }).messages,
      0,
      'Responses-style input has no history either',
    );
    assert.equal(readPromptBlocks(null).messages, 0);
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
    // b shares 6 blocks with a: it matches to a's last checkpoint within them (blocks 0-3).
    assert.equal(ix.matchedBlocks(b), 4);
    assert.equal(ix.matchedBlocks(a.slice(0, 3)), 0, 'no checkpoint within the first 3 blocks');
    assert.equal(ix.matchedBlocks(a.slice(0, 8)), 8);
    assert.equal(ix.matchedBlocks(new Int32Array(0)), 0);
  });

  it('matches a prompt that extends a recorded one exactly, to the recorded one’s last block', () => {
    const ix = new PrefixIndex(1000);
    const turn1 = text('a conversation so far ', PROMPT_BLOCK_CHARS * 10 + 100);
    const turn2 = blockHashes(turn1 + text('and its next turn ', PROMPT_BLOCK_CHARS * 7));
    ix.record(blockHashes(turn1)); // 10 full blocks: checkpoints 3 and 7, and block 9
    assert.equal(ix.matchedBlocks(turn2), 10);
    assert.equal(ix.atLeast(turn2, 10), 8, 'checkpoint 7 is held');
    assert.equal(ix.atLeast(turn2, 13), -1, 'checkpoint 11 is not');
    assert.equal(ix.atLeast(turn2, 3), 0, 'nothing to look at below block 3');
    assert.equal(ix.matchedBlocks(turn2, 8), 10, 'a search from a known held count');
    ix.record(turn2, 10);
    assert.equal(ix.matchedBlocks(turn2), turn2.length);
  });

  it('forgets the oldest blocks past its capacity and keeps the ones still used', () => {
    const ix = new PrefixIndex(48); // generations of 32 blocks (16 entries at most)
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
    assert.ok(ix.size <= 2 * ix.generationEntries);
  });

  it('tells how many blocks were recorded since a prefix was last used', () => {
    const ix = new PrefixIndex(1000);
    const turn1 = blockHashes(text('a conversation ', PROMPT_BLOCK_CHARS * 8));
    const turn2 = blockHashes(
      text('a conversation ', PROMPT_BLOCK_CHARS * 8) + text('more ', PROMPT_BLOCK_CHARS * 4),
    );
    assert.equal(ix.ageOf(turn1[7]!), -1, 'not held');
    ix.record(turn1);
    assert.equal(ix.ageOf(turn1[7]!), 0);
    ix.record(blockHashes(text('someone else ', PROMPT_BLOCK_CHARS * 30)));
    assert.equal(ix.ageOf(turn1[7]!), 30);
    // The next turn reuses turn 1's blocks: its prefix is the newest use again.
    ix.record(turn2, ix.matchedBlocks(turn2));
    assert.equal(ix.ageOf(turn1[7]!), 0);
    assert.equal(ix.ageOf(turn2[11]!), 0);
    ix.record(blockHashes(text('a third ', PROMPT_BLOCK_CHARS * 5)));
    assert.equal(ix.ageOf(turn2[11]!), 5);
    // What matchedBlocks last found carries the same age, however it was found.
    const turn3 = blockHashes(
      text('a conversation ', PROMPT_BLOCK_CHARS * 8) + text('else ', PROMPT_BLOCK_CHARS * 9),
    );
    assert.equal(ix.matchedBlocks(turn2), 12);
    assert.equal(ix.matchedAge, 5);
    assert.equal(ix.matchedBlocks(turn3), 8, 'turn 1 is a prefix of turn 3');
    assert.equal(ix.matchedAge, ix.ageOf(turn1[7]!));
    assert.equal(ix.atLeast(turn3, 8), 8);
    assert.equal(ix.matchedBlocks(turn3, 8), 8);
    assert.equal(ix.matchedAge, ix.ageOf(turn1[7]!));
    assert.equal(ix.matchedBlocks(turn3, 4), 8);
    assert.equal(ix.matchedAge, ix.ageOf(turn1[7]!));
  });

  it('bounds the age of what it forgot once it has dropped a generation, and not before', () => {
    const ix = new PrefixIndex(48); // generations of 32 blocks
    const prompt = (i: number): Int32Array => blockHashes(text(`prompt ${i} `, PROMPT_BLOCK_CHARS * 8));
    for (let i = 0; i < 7; i++) ix.record(prompt(i)); // 56 blocks: one rotation, nothing dropped
    assert.equal(ix.forgottenAge, 0, 'a block it does not hold was never recorded');
    assert.equal(ix.matchedBlocks(prompt(0)), 8);
    for (let i = 7; i < 9; i++) ix.record(prompt(i)); // 72 blocks: the first generation dropped
    assert.equal(ix.matchedBlocks(prompt(0)), 0);
    assert.equal(ix.forgottenAge, 32 + 8, 'the previous generation and the current one since');
  });

  it('finds on every node, through a long trace, the prefix a search of every block finds, and its age', () => {
    // Four nodes with small caches (generations of 134 blocks: many rotations), conversations over
    // shared system prompts whose turns end anywhere between checkpoints, prompts that share only
    // part of another, and prompts shorter than a checkpoint.
    const nodes = Array.from({ length: 4 }, () => new PrefixIndex(200));
    const next = random(11);
    const systems = Array.from({ length: 3 }, (_, i) =>
      text(`system ${i} `, PROMPT_BLOCK_CHARS * (5 + 7 * i) + 40 * i),
    );
    const conversations: string[] = [];
    let checked = 0;
    let flaggedEnds = 0;
    for (let step = 0; step < 3000; step++) {
      const kind = next(10);
      let prompt: string;
      if (kind === 0) prompt = text(`short ${next(5)} `, PROMPT_BLOCK_CHARS * (1 + next(3)));
      else if (kind === 1 && conversations.length > 0) {
        // Part of a conversation, cut anywhere, then something else.
        const c = conversations[next(conversations.length)]!;
        prompt = c.slice(0, next(c.length)) + text(`aside ${step} `, PROMPT_BLOCK_CHARS * (1 + next(4)));
      } else if (kind < 6 || conversations.length < 8) {
        const c = systems[next(3)]! + text(`user ${step} `, 30 + next(PROMPT_BLOCK_CHARS * 6));
        conversations.push(c);
        if (conversations.length > 24) conversations.splice(next(24), 1);
        prompt = c;
      } else {
        const i = next(conversations.length);
        const c = conversations[i]! + text(`turn ${step} `, 30 + next(PROMPT_BLOCK_CHARS * 9));
        conversations[i] = c;
        prompt = c;
      }
      const hashes = blockHashes(prompt);
      for (const ix of nodes) {
        const expected = plainMatch(ix, hashes);
        const got = ix.matchedBlocks(hashes);
        assert.equal(got, expected, `step ${step}`);
        if (got > 0) assert.equal(ix.matchedAge, ix.ageOf(hashes[got - 1]!), `age at step ${step}`);
        if (got > 0 && got % CHECKPOINT_BLOCKS !== 0 && got < hashes.length) flaggedEnds++;
        checked++;
      }
      const k = next(nodes.length);
      nodes[k]!.record(hashes, nodes[k]!.matchedBlocks(hashes));
    }
    assert.equal(checked, 12_000);
    assert.ok(flaggedEnds > 100, `prompts found to end past a checkpoint: ${flaggedEnds}`);
  });

  it('still looks past a checkpoint whose newer copy lacks the flag its older one has', () => {
    const ix = new PrefixIndex(48); // generations of 32 blocks
    const base = text('a recorded prompt ', PROMPT_BLOCK_CHARS * 6); // 6 blocks: checkpoint 3, ends at 5
    ix.record(blockHashes(base));
    for (let i = 0; i < 4; i++) ix.record(blockHashes(text(`filler ${i} `, PROMPT_BLOCK_CHARS * 8)));
    // Rotated: the prompt is in the previous generation. A prompt sharing its first 4 blocks puts a
    // new copy of checkpoint 3 in the current one, without the flag.
    const other = blockHashes(
      base.slice(0, PROMPT_BLOCK_CHARS * 4) + text('elsewhere ', PROMPT_BLOCK_CHARS * 6),
    );
    ix.record(other, ix.matchedBlocks(other));
    const extended = blockHashes(base + text('and more ', PROMPT_BLOCK_CHARS * 5));
    assert.equal(ix.matchedBlocks(extended), 6);
    assert.equal(plainMatch(ix, extended), 6);
  });

  it('finds a recorded prompt shorter than a checkpoint at the start of a longer one, until it is forgotten', () => {
    const ix = new PrefixIndex(48);
    const short = text('two blocks ', PROMPT_BLOCK_CHARS * 2);
    ix.record(blockHashes(short));
    const longer = blockHashes(short + text('then a question ', PROMPT_BLOCK_CHARS * 9));
    assert.equal(ix.matchedBlocks(longer), 2);
    const fill = (i: number): void => ix.record(blockHashes(text(`filler ${i} `, PROMPT_BLOCK_CHARS * 8)));
    for (let i = 0; i < 4; i++) fill(i); // one rotation: in the previous generation
    assert.equal(ix.matchedBlocks(longer), 2);
    for (let i = 4; i < 8; i++) fill(i); // dropped
    assert.equal(ix.matchedBlocks(longer), 0);
    assert.equal(plainMatch(ix, longer), 0);
  });

  it('reads, through many generation changes, as generations zeroed when dropped would', () => {
    // Tables dropped by their birth stamp (never zeroed on the way) against the model's maps: every
    // hash ever recorded is looked up after every recording. Tiny indexes (16 entries a generation)
    // change generation several times within one long prompt; clocks start at 0 and next to both
    // int32 wraps.
    for (const [capacity, startClock] of [
      [16, 0],
      [16, 0x7fffff00],
      [200, -3000],
      [1000, 0x7ffff000],
    ] as const) {
      const ix = new PrefixIndex(capacity, startClock);
      const model = new GenerationsModel(ix, startClock);
      const next = random(capacity + 7);
      const seen = new Set<number>();
      const prompts: Int32Array[] = [];
      for (let step = 0; step < 600; step++) {
        const kind = next(4);
        let hashes: Int32Array;
        if (kind === 0 && prompts.length > 0)
          hashes = prompts[next(prompts.length)]!; // used again
        else if (kind === 1 && prompts.length > 0) {
          // The next turn of an earlier prompt.
          const p = prompts[next(prompts.length)]!;
          hashes = blockHashes(
            text(`${p[0]!} turn ${step} `, PROMPT_BLOCK_CHARS * (p.length + 1 + next(12))),
          );
          hashes.set(p.subarray(0, Math.min(p.length, hashes.length - 1)));
        } else {
          hashes = blockHashes(
            text(`prompt ${capacity} ${step} `, PROMPT_BLOCK_CHARS * (1 + next(kind === 2 ? 220 : 20))),
          );
        }
        if (prompts.length < 64) prompts.push(hashes);
        else prompts[next(64)] = hashes;
        const matched = ix.matchedBlocks(hashes);
        ix.record(hashes, matched);
        model.record(hashes, matched);
        // The entries a recording writes: its checkpoints and its last block.
        for (let k = CHECKPOINT_BLOCKS - 1; k < hashes.length; k += CHECKPOINT_BLOCKS) seen.add(hashes[k]!);
        seen.add(hashes[hashes.length - 1]!);
        for (const h of seen) {
          const stamp = model.stamp(h);
          assert.equal(ix.ageOf(h), stamp === null ? -1 : (model.clock - stamp) | 0, `step ${step}`);
        }
        assert.equal(ix.size, model.size, `size at step ${step}`);
        assert.equal(ix.matchedBlocks(hashes), plainMatch(ix, hashes));
      }
    }
  });

  it('zeroes a dropped generation for real before the clock could take old stamps for new ones', () => {
    const ix = new PrefixIndex(1000); // generations of 667 blocks
    const gone = blockHashes(text('dropped long ago ', PROMPT_BLOCK_CHARS * 8));
    ix.record(gone);
    const fill = (i: number): void => ix.record(blockHashes(text(`filler ${i} `, PROMPT_BLOCK_CHARS * 100)));
    let i = 0;
    for (; i < 14; i++) fill(i); // two changes of generation: dropped
    assert.equal(ix.ageOf(gone[7]!), -1);
    // 2^31 blocks recorded on the node that never wrote the dropped entry's slot (standing in for
    // them: the clock moved on), then more changes of generation, each recycling the old tables.
    assert.equal(typeof Reflect.get(ix, 'clock'), 'number');
    Reflect.set(ix, 'clock', ((Reflect.get(ix, 'clock') as number) + 2 ** 31) | 0);
    for (let end = i + 40; i < end; i++) {
      fill(i);
      assert.equal(ix.ageOf(gone[7]!), -1, `after filler ${i}`);
    }
    assert.equal(ix.matchedBlocks(gone), 0);
  });

  it('has a fixed memory size, whatever it is fed', () => {
    const ix = new PrefixIndex(6250);
    const before = ix.memoryBytes;
    // Generations of 4,167 blocks and at most 2,084 entries, tables at most half full, 8-byte slots.
    assert.equal(before, 2 * 8192 * 8);
    for (let i = 0; i < 200; i++) ix.record(blockHashes(text(`prompt ${i} `, PROMPT_BLOCK_CHARS * 50)));
    assert.equal(ix.memoryBytes, before);
    assert.ok(ix.size <= 2 * ix.generationEntries);
  });
});
