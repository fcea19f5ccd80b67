/**
 * The native codec for OpenAI `/v1/embeddings`: items become one request whose `input` array is the
 * concatenation of the items' inputs, and the answer's `data` is cut back per item with indexes
 * rewritten from 0 and `usage` shared out. It parses and builds JSON only.
 */

import type { BatchCodec } from './batch-codec.js';

type Obj = Record<string, unknown>;

/** The inputs an item contributes: a string or token array is one input, an array of them several. */
function inputsOf(body: object): readonly unknown[] {
  const input = (body as Obj)['input'];
  if (Array.isArray(input) && input.length > 0 && (typeof input[0] === 'string' || Array.isArray(input[0]))) {
    return input;
  }
  return [input];
}

/** Rough size of one input for sharing `usage`: characters of a string, length of a token array. */
function weightOf(input: unknown): number {
  if (typeof input === 'string') return input.length;
  if (Array.isArray(input)) return input.length;
  return 1;
}

/**
 * Splits `total` tokens over parts in proportion to `weights` with integer shares that sum to
 * `total` exactly (largest remainder).
 */
export function shareTokens(total: number, weights: readonly number[]): number[] {
  let sum = 0;
  for (const w of weights) sum += w;
  const shares = new Array<number>(weights.length);
  const rest = new Array<number>(weights.length);
  let given = 0;
  for (let i = 0; i < weights.length; i++) {
    const exact = sum === 0 ? total / weights.length : (total * (weights[i] ?? 0)) / sum;
    shares[i] = Math.floor(exact);
    rest[i] = exact - Math.floor(exact);
    given += Math.floor(exact);
  }
  const order = rest.map((_, i) => i).sort((a, b) => (rest[b] ?? 0) - (rest[a] ?? 0) || a - b);
  for (let k = 0; given < total && k < order.length; k++, given++) {
    const i = order[k] ?? 0;
    shares[i] = (shares[i] ?? 0) + 1;
  }
  return shares;
}

/**
 * The embeddings codec. Items share one call only when every field but `input` is equal (`model`,
 * `dimensions`, `encoding_format`, `user`, and whatever else a server reads: `input_type`,
 * `truncate_prompt_tokens`, ...), since the call carries the first item's fields for all; items are
 * identical when their `input` is, type included (a string is never its JSON spelled as an array).
 * `usage` is shared in proportion to each item's input length (the node reports only the total),
 * so shares are estimates that always add up to the node's figures.
 */
export const openAiEmbeddingsCodec: BatchCodec = {
  groupKey(body) {
    // HOT: a few small fields, each spelled as JSON (so 256 and "256" differ), in name order.
    const b = body as Obj;
    const names = Object.keys(b);
    if (names.length > 2) names.sort();
    let key = '';
    for (const name of names) {
      if (name === 'input') continue;
      const v = b[name];
      if (v === undefined) continue;
      // Names as JSON too: a name holding the separators cannot spell another body's key.
      key += `${JSON.stringify(name)}:${JSON.stringify(v)},`;
    }
    return key;
  },

  combinable(body) {
    // HOT: a non-empty string, or a non-empty list of strings, of token ids (one input), or of
    // non-empty token lists; anything else goes to the node alone, as sent.
    const input = (body as Obj)['input'];
    if (typeof input === 'string') return input.length > 0;
    if (!Array.isArray(input) || input.length === 0) return false;
    const first: unknown = input[0];
    if (typeof first === 'string') return input.every((x) => typeof x === 'string' && x.length > 0);
    if (typeof first === 'number') return input.every((x) => Number.isInteger(x));
    return input.every(
      (x) => Array.isArray(x) && x.length > 0 && x.every((t: unknown) => Number.isInteger(t)),
    );
  },

  dedupKey(body) {
    const input = (body as Obj)['input'];
    return typeof input === 'string' ? `s${input}` : `j${JSON.stringify(input)}`;
  },

  encode(bodies) {
    const first = (bodies[0] ?? {}) as Obj;
    const input: unknown[] = [];
    for (const b of bodies) for (const x of inputsOf(b)) input.push(x);
    const out: Obj = { ...first, input };
    return Buffer.from(JSON.stringify(out));
  },

  split(answer, bodies) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(answer.toString('utf8'));
    } catch {
      return null;
    }
    const p = parsed as Obj;
    const data = p['data'];
    if (typeof parsed !== 'object' || parsed === null || !Array.isArray(data)) return null;
    const counts = bodies.map((b) => inputsOf(b).length);
    let total = 0;
    for (const c of counts) total += c;
    if (data.length !== total) return null;
    // The node's `index` is authoritative for order, not the array position.
    const byIndex = new Array<Obj | undefined>(total);
    for (const d of data as unknown[]) {
      const i = (d as Obj | null)?.['index'];
      if (typeof i !== 'number' || !Number.isInteger(i) || i < 0 || i >= total || byIndex[i] !== undefined) {
        return null;
      }
      byIndex[i] = d as Obj;
    }
    const usage = (p['usage'] ?? {}) as Obj;
    const prompt = typeof usage['prompt_tokens'] === 'number' ? usage['prompt_tokens'] : 0;
    const totalTokens = typeof usage['total_tokens'] === 'number' ? usage['total_tokens'] : prompt;
    const weights = bodies.map((b) => {
      let w = 0;
      for (const x of inputsOf(b)) w += weightOf(x);
      return w;
    });
    const promptShares = shareTokens(prompt, weights);
    const totalShares = shareTokens(totalTokens, weights);
    const out: Buffer[] = [];
    let offset = 0;
    for (let k = 0; k < bodies.length; k++) {
      const n = counts[k] ?? 0;
      const mine: Obj[] = [];
      for (let j = 0; j < n; j++) mine.push({ ...byIndex[offset + j], index: j });
      offset += n;
      const body: Obj = {
        ...p,
        data: mine,
        usage: { ...usage, prompt_tokens: promptShares[k] ?? 0, total_tokens: totalShares[k] ?? 0 },
      };
      out.push(Buffer.from(JSON.stringify(body)));
    }
    return out;
  },
};
