/**
 * The simulated node's model profile: what one GPU running one model costs in time and memory.
 * This file owns the field list, the defaults and validation; reading YAML files is `profile-loader.ts`.
 * Keys are snake_case, as in every Sluice YAML file.
 */

/** How a streaming response's head goes out. */
export const StreamHead = {
  /** Head flushed as soon as the request is accepted, before queueing and prefill (vLLM does this). */
  immediate: 'immediate',
  /** Head held back until the first token, so time-to-first-byte equals time-to-first-token. */
  firstToken: 'first-token',
} as const;
export type StreamHead = (typeof StreamHead)[keyof typeof StreamHead];

/** A validated profile. Every time is in model milliseconds, before `time_scale` and speed factors. */
export interface SimProfile {
  /** Profile name, shown in logs. */
  name: string;
  /** Free text: hardware, engine, where the numbers come from. */
  description: string;
  /** Multiplies every modelled time (prefill, decode, embeddings); 0.01 makes a 100× faster node. Default 1. */
  time_scale: number;
  /** Model id served on the chat and completions endpoints. */
  chat_model: string;
  /** Model id served on the embeddings endpoint. */
  embedding_model: string;
  /** Reject requests naming another model with 404 (vLLM does); false accepts and echoes any name. Default false. */
  strict_models: boolean;
  /** Longest prompt + output, in tokens; longer requests get 400. */
  max_model_len: number;
  /** Concurrent sequence slots (vLLM `max_num_seqs`); requests beyond wait in a FIFO queue. */
  max_running: number;
  /** Token budget of one engine step (prefill chunks + one per decoding sequence); 0 = unlimited. */
  max_batched_tokens: number;
  /** KV-cache pool in tokens: running sequences reserve prompt + max_tokens; the prefix cache holds the rest. */
  kv_capacity_tokens: number;
  /** Tokens per KV block; the prefix cache matches whole leading blocks only. */
  block_tokens: number;
  /** Fixed cost of a step that prefills anything, ms. */
  prefill_fixed_ms: number;
  /** Prefill throughput for uncached prompt tokens, tokens/s. */
  prefill_tokens_per_s: number;
  /** Decode step floor (weights read once per step), ms. */
  decode_base_ms: number;
  /** Decode cost per running sequence, ms. */
  decode_per_seq_ms: number;
  /** Decode cost per running sequence per context token (KV read), ms. */
  decode_per_ctx_token_ms: number;
  /** Output tokens when the request gives neither `max_tokens` nor `max_completion_tokens`. */
  default_max_tokens: number;
  /** Embedding vector length. Default 64. */
  embedding_dim: number;
  /** Fixed cost of one embeddings request, ms. */
  embedding_fixed_ms: number;
  /** Cost per input item of an embeddings request, ms. */
  embedding_per_item_ms: number;
  /** Most inputs accepted in one embeddings request (OpenAI allows 2048). */
  embedding_max_items: number;
  /** When a stream's response head is sent. Default `immediate`. */
  stream_head: StreamHead;
}

/**
 * Defaults for keys a profile leaves out: the `llama-8b-h100-bf16` calibration (see that YAML file
 * for the sources of each number), so an incomplete profile still behaves like a real node, except
 * `embedding_dim` (64: small payloads).
 */
export const DEFAULT_PROFILE: Readonly<SimProfile> = Object.freeze({
  name: 'default',
  description: '',
  time_scale: 1,
  chat_model: 'meta-llama/Llama-3.1-8B-Instruct',
  embedding_model: 'BAAI/bge-base-en-v1.5',
  strict_models: false,
  max_model_len: 131072,
  max_running: 256,
  max_batched_tokens: 8192,
  kv_capacity_tokens: 410000,
  block_tokens: 16,
  prefill_fixed_ms: 12,
  prefill_tokens_per_s: 28000,
  decode_base_ms: 6,
  decode_per_seq_ms: 0.02,
  decode_per_ctx_token_ms: 0.000049,
  default_max_tokens: 128,
  embedding_dim: 64,
  embedding_fixed_ms: 4,
  embedding_per_item_ms: 0.17,
  embedding_max_items: 2048,
  stream_head: 'immediate',
});

type FieldRule =
  | { kind: 'string' }
  | { kind: 'boolean' }
  | { kind: 'enum'; values: readonly string[] }
  | { kind: 'number'; min: number; exclusiveMin?: boolean; integer?: boolean };

const RULES: Record<keyof SimProfile, FieldRule> = {
  name: { kind: 'string' },
  description: { kind: 'string' },
  time_scale: { kind: 'number', min: 0, exclusiveMin: true },
  chat_model: { kind: 'string' },
  embedding_model: { kind: 'string' },
  strict_models: { kind: 'boolean' },
  max_model_len: { kind: 'number', min: 1, integer: true },
  max_running: { kind: 'number', min: 1, integer: true },
  max_batched_tokens: { kind: 'number', min: 0, integer: true },
  kv_capacity_tokens: { kind: 'number', min: 1, integer: true },
  block_tokens: { kind: 'number', min: 1, integer: true },
  prefill_fixed_ms: { kind: 'number', min: 0 },
  prefill_tokens_per_s: { kind: 'number', min: 0, exclusiveMin: true },
  decode_base_ms: { kind: 'number', min: 0 },
  decode_per_seq_ms: { kind: 'number', min: 0 },
  decode_per_ctx_token_ms: { kind: 'number', min: 0 },
  default_max_tokens: { kind: 'number', min: 1, integer: true },
  embedding_dim: { kind: 'number', min: 1, integer: true },
  embedding_fixed_ms: { kind: 'number', min: 0 },
  embedding_per_item_ms: { kind: 'number', min: 0 },
  embedding_max_items: { kind: 'number', min: 1, integer: true },
  stream_head: { kind: 'enum', values: Object.values(StreamHead) },
};

/** A profile that failed validation; the message names the source and the key. */
export class SimProfileError extends Error {
  override readonly name = 'SimProfileError';
}

function checkField(source: string, key: string, rule: FieldRule, value: unknown): void {
  const bad = (what: string): never => {
    throw new SimProfileError(`${source}: key "${key}" ${what}, got ${JSON.stringify(value)}`);
  };
  switch (rule.kind) {
    case 'string':
      if (typeof value !== 'string') bad('must be a string');
      return;
    case 'boolean':
      if (typeof value !== 'boolean') bad('must be true or false');
      return;
    case 'enum':
      if (typeof value !== 'string' || !rule.values.includes(value))
        bad(`must be one of ${rule.values.join(', ')}`);
      return;
    case 'number': {
      if (typeof value !== 'number' || !Number.isFinite(value)) bad('must be a number');
      const n = value as number;
      if (rule.integer === true && !Number.isInteger(n)) bad('must be an integer');
      if (rule.exclusiveMin === true ? n <= rule.min : n < rule.min) {
        bad(`must be ${rule.exclusiveMin === true ? '>' : '>='} ${rule.min}`);
      }
      return;
    }
  }
}

/**
 * Validates a parsed profile object and fills missing keys from `DEFAULT_PROFILE`.
 * Throws `SimProfileError` naming `source` and the key for an unknown key or a wrong type or range.
 */
export function validateSimProfile(input: unknown, source: string): SimProfile {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new SimProfileError(`${source}: a profile must be a mapping of keys to values`);
  }
  const out: Record<string, unknown> = { ...DEFAULT_PROFILE };
  for (const [key, value] of Object.entries(input)) {
    const rule = (RULES as Record<string, FieldRule | undefined>)[key];
    if (rule === undefined) {
      throw new SimProfileError(`${source}: unknown key "${key}" (known: ${Object.keys(RULES).join(', ')})`);
    }
    checkField(source, key, rule, value);
    out[key] = value;
  }
  return out as unknown as SimProfile;
}
