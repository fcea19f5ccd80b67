/**
 * Deterministic model outputs: the prompt text a chat request stands for, token estimates, the words
 * a node generates for a prompt and the embedding of a text. Tests import these to recompute what a
 * node must have returned for input i; nothing here may depend on time, node or request order.
 */

import { SeededRandom } from './prng.js';

/** Characters per token used by every estimate in the simulator (a common rule of thumb for English). */
export const CHARS_PER_TOKEN = 4;

/**
 * The vocabulary generated text is drawn from: short words, so that the text of n generated tokens
 * is about n × 4 characters and agrees with `estimateTokens`.
 */
const WORDS: readonly string[] = [
  'the of and to in is that for it as was with be by on not',
  'he this are or his from at which but have an had they you were their',
  'one all we can her has there been if more when will would who so no',
  'node token cache batch queue model slot step fast slow warm cold key data load gpu',
]
  .join(' ')
  .split(' ');

/** One chat message as the simulator reads it: a role and its text (content parts flattened). */
export interface PromptMessage {
  role: string;
  content: string;
}

/**
 * Estimated token count of a text: ⌈characters / 4⌉. Used for prompt tokens, embedding input tokens
 * and prefix-cache block boundaries alike, so usage and cache accounting agree.
 */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/**
 * The canonical prompt text of a chat request, a minimal chat template:
 * `<|role|>\ncontent\n` per message, then `<|assistant|>\n` (the generation prompt). A conversation's
 * next turn therefore starts with the previous turn's prompt plus its reply, which is what lets the
 * prefix cache hit on multi-turn traffic.
 */
export function chatPromptText(messages: readonly PromptMessage[]): string {
  let text = '';
  for (const m of messages) text += `<|${m.role}|>\n${m.content}\n`;
  return text + '<|assistant|>\n';
}

/**
 * The first `count` generated words for a prompt text. A prompt always yields the same sequence, and
 * a shorter `count` yields a prefix of a longer one. Each word is one output token.
 */
export function generatedWords(promptText: string, count: number): string[] {
  const rng = SeededRandom.fromText(`gen\u0000${promptText}`);
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) out[i] = WORDS[rng.nextInt(WORDS.length)] ?? 'the';
  return out;
}

/** The piece of text token `index` contributes: the word, preceded by a space except for the first. */
export function tokenPiece(words: readonly string[], index: number): string {
  const w = words[index] ?? '';
  return index === 0 ? w : ` ${w}`;
}

/** The full text a node returns for `/v1/completions` with this prompt and `max_tokens`. */
export function expectedCompletionText(prompt: string, maxTokens: number): string {
  return generatedWords(prompt, maxTokens).join(' ');
}

/** The assistant content a node returns for `/v1/chat/completions` with these messages and `max_tokens`. */
export function expectedChatText(messages: readonly PromptMessage[], maxTokens: number): string {
  return generatedWords(chatPromptText(messages), maxTokens).join(' ');
}

/**
 * The embedding of a text as float32 values: a unit vector of `dim` Gaussian components drawn from a
 * generator seeded by the text. Returned as a Float32Array so float and base64 encodings agree bit for bit.
 */
export function embeddingVector(text: string, dim: number): Float32Array {
  const rng = SeededRandom.fromText(`emb\u0000${text}`);
  const raw = new Float64Array(dim);
  let norm = 0;
  for (let i = 0; i < dim; i++) {
    const g = rng.nextGaussian();
    raw[i] = g;
    norm += g * g;
  }
  norm = Math.sqrt(norm) || 1;
  const out = new Float32Array(dim);
  for (let i = 0; i < dim; i++) out[i] = (raw[i] ?? 0) / norm;
  return out;
}

/** The embedding a node returns for `text` (as `encoding_format: 'float'` numbers). */
export function expectedEmbedding(text: string, dim: number): number[] {
  return Array.from(embeddingVector(text, dim));
}

/** Encodes float32 values as OpenAI's base64 embedding format (little-endian float32). */
export function embeddingToBase64(vector: Float32Array): string {
  const buf = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) buf.writeFloatLE(vector[i] ?? 0, i * 4);
  return buf.toString('base64');
}

/** Decodes OpenAI's base64 embedding format back to numbers (for tests and clients). */
export function decodeBase64Embedding(b64: string): number[] {
  const buf = Buffer.from(b64, 'base64');
  const out = new Array<number>(buf.length >>> 2);
  for (let i = 0; i < out.length; i++) out[i] = buf.readFloatLE(i * 4);
  return out;
}
