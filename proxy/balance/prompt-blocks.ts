/**
 * The prompt of a request as a chain of block hashes, the unit cache-aware routing compares with
 * what each node has likely cached: the prompt text (as the prefix affinity key reads it) cut into
 * blocks of PROMPT_BLOCK_CHARS characters, block k's hash covering all text up to its end. Two
 * prompts share their first k hashes exactly when they share their first k blocks of text, so the
 * next turn of a conversation matches every full block of the turn before it. Only full blocks are
 * hashed; computed once per request.
 */
import { promptPrefix } from './affinity-key.js';
import { mix32 } from './stable-hash.js';

/** Characters per block: about 64 tokens at 4 characters per token (4 of vLLM's 16-token blocks). */
export const PROMPT_BLOCK_CHARS = 256;
/** Tokens a block stands for in estimates (characters / 4, the token estimate's rule). */
export const PROMPT_BLOCK_TOKENS = PROMPT_BLOCK_CHARS / 4;
/** Longest prompt prefix hashed, characters (longer prompts match at most this much). */
export const MAX_PROMPT_CHARS = 1 << 19;

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/**
 * The block hashes of the request body's prompt (see the module comment), at most
 * `MAX_PROMPT_CHARS / PROMPT_BLOCK_CHARS` of them; an empty array when the prompt is shorter than
 * one block or the body has none. Never 0 (0 marks an empty slot in the prefix index).
 */
export function promptBlockHashes(body: unknown): Uint32Array {
  return blockHashes(promptPrefix(body, MAX_PROMPT_CHARS));
}

/**
 * Tokens of a chat prompt before its last message (the conversation so far, which a node that
 * served the previous turn holds), by the same text and estimate; 0 without at least two messages.
 */
export function promptHistoryTokens(body: unknown): number {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 0;
  const messages = (body as { messages?: unknown }).messages;
  if (!Array.isArray(messages) || messages.length < 2) return 0;
  const history = promptPrefix({ ...body, messages: messages.slice(0, -1) }, MAX_PROMPT_CHARS);
  return Math.floor(history.length / 4);
}

/** The chained block hashes of `text` (UTF-16 code units, FNV-1a carried across blocks, each finalised). */
export function blockHashes(text: string): Uint32Array {
  const blocks = Math.floor(text.length / PROMPT_BLOCK_CHARS);
  const out = new Uint32Array(blocks);
  let h = FNV_OFFSET;
  for (let b = 0, i = 0; b < blocks; b++) {
    const end = i + PROMPT_BLOCK_CHARS;
    for (; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
    const m = mix32(h);
    out[b] = m === 0 ? 1 : m;
  }
  return out;
}
