/**
 * The prompt of a request as a chain of block hashes, the unit cache-aware routing compares with
 * what each node has likely cached: the prompt text (`prompt-text.ts`, as the prefix affinity key
 * reads it) cut into blocks of PROMPT_BLOCK_CHARS characters, block k's hash covering all text up
 * to its end. Two prompts share their first k hashes exactly when they share their first k blocks
 * of text, so the next turn of a conversation matches every full block of the turn before it. Only
 * full blocks are hashed. The text is hashed as it is walked, never built, once per request.
 */
import { walkPromptText, type PromptSink } from './prompt-text.js';
import { mix32 } from './stable-hash.js';

/** Characters per block: about 64 tokens at 4 characters per token (4 of vLLM's 16-token blocks). */
export const PROMPT_BLOCK_CHARS = 256;
/** Tokens a block stands for in estimates (characters / 4, the token estimate's rule). */
export const PROMPT_BLOCK_TOKENS = PROMPT_BLOCK_CHARS / 4;
/** Longest prompt prefix hashed, characters (longer prompts match at most this much). */
export const MAX_PROMPT_CHARS = 1 << 19;
/** Most blocks a prompt has (MAX_PROMPT_CHARS / PROMPT_BLOCK_CHARS). */
const MAX_PROMPT_BLOCKS = MAX_PROMPT_CHARS / PROMPT_BLOCK_CHARS;

/** Bits a block hash keeps: with compressed pointers an int32 past ±2^30 is boxed when passed on. */
const HASH_MASK = 0x3fffffff;

const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;

/** What cache-aware reads of one request's prompt (`PickRequest.promptBlocks`). */
export interface PromptBlocks {
  /**
   * The chained block hashes (see the module comment), 30-bit (`HASH_MASK`) so that reading one or
   * passing it to a call never allocates, even where V8 compresses pointers (its small integers
   * then hold 31 bits); never 0 (0 marks an empty slot in the prefix index). Empty for a prompt shorter
   * than one block or a body without one.
   */
  readonly hashes: Int32Array;
  /**
   * Tokens (characters / 4) of the prompt before the last of a chat body's messages: the
   * conversation so far, which the node that served the previous turn holds. 0 with fewer than two
   * messages.
   */
  readonly historyTokens: number;
  /**
   * Messages of a chat body (its top-level `messages`), 0 for other bodies: a conversation's next
   * turn has a few more (the answer and the new question, or a tool call and its results), so a
   * balancer that remembers the count it placed a key with can tell whether it placed the previous
   * turn.
   */
  readonly messages: number;
}

/** Hashes text as it arrives, block by block, into a scratch array reused by every request. */
class BlockHasher implements PromptSink {
  private readonly out = new Int32Array(MAX_PROMPT_BLOCKS);
  /** Blocks finished so far. */
  blocks = 0;
  /** Characters taken so far (at most MAX_PROMPT_CHARS). */
  chars = 0;
  /** `chars` when the last message started; -1 before. */
  historyChars = -1;
  /** FNV-1a state, carried across blocks. */
  private h = FNV_OFFSET;
  /** Characters of the block in progress. */
  private inBlock = 0;

  reset(): void {
    this.blocks = 0;
    this.chars = 0;
    this.historyChars = -1;
    this.h = FNV_OFFSET;
    this.inBlock = 0;
  }

  full(): boolean {
    return this.chars >= MAX_PROMPT_CHARS;
  }

  add(s: string): void {
    const room = MAX_PROMPT_CHARS - this.chars;
    const n = s.length < room ? s.length : room;
    const out = this.out;
    let h = this.h;
    let k = this.inBlock;
    let b = this.blocks;
    for (let i = 0; i < n; i++) {
      h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
      if (++k === PROMPT_BLOCK_CHARS) {
        const m = mix32(h) & HASH_MASK;
        out[b++] = m === 0 ? 1 : m;
        k = 0;
      }
    }
    this.h = h;
    this.inBlock = k;
    this.blocks = b;
    this.chars += n;
  }

  lastMessage(): void {
    this.historyChars = this.chars;
  }

  /** The finished blocks, copied out of the scratch array. */
  hashes(): Int32Array {
    return this.out.slice(0, this.blocks);
  }
}

const hasher = new BlockHasher();

/**
 * The prompt blocks of a request body (see PromptBlocks), at most `MAX_PROMPT_CHARS /
 * PROMPT_BLOCK_CHARS` of them. One walk of the prompt text; allocates the result only.
 */
export function readPromptBlocks(body: unknown): PromptBlocks {
  const w = hasher;
  w.reset();
  walkPromptText(body, w);
  let history = w.historyChars;
  // The walk stopped at the length bound before the last message: all it read is history.
  if (history < 0 && w.full()) history = hasLaterMessages(body) ? w.chars : 0;
  return {
    hashes: w.hashes(),
    historyTokens: history > 0 ? Math.floor(history / 4) : 0,
    messages: messageCount(body),
  };
}

/** Length of `body`'s top-level `messages` array, 0 when it has none. */
function messageCount(body: unknown): number {
  if (typeof body !== 'object' || body === null) return 0;
  const m = (body as { messages?: unknown }).messages;
  return Array.isArray(m) ? m.length : 0;
}

/** True when `body` is a chat body with two or more messages. */
function hasLaterMessages(body: unknown): boolean {
  const m = (body as { messages?: unknown }).messages;
  return Array.isArray(m) && m.length >= 2;
}

/** The chained block hashes of `text` (UTF-16 code units, FNV-1a carried across blocks, each finalised). */
export function blockHashes(text: string): Int32Array {
  const w = hasher;
  w.reset();
  w.add(text);
  return w.hashes();
}
