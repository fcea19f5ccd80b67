/**
 * Reads and validates OpenAI request bodies (chat, completions, embeddings) into the few fields the
 * simulator uses. Anything a real server would reject with 400 is rejected here with a message
 * naming the field; fields the simulator has no use for are ignored, as vLLM ignores unknown extras.
 */

import { chatPromptText, type PromptMessage } from './outputs.js';

/** A request the node rejects with 400 (or `status`), in OpenAI's error shape. */
export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
  constructor(
    message: string,
    readonly param: string | null = null,
    readonly status = 400,
  ) {
    super(message);
  }
}

/** A chat or completions request reduced to what the latency model and output generator need. */
export interface GenerateRequest {
  /** `chat` for /v1/chat/completions, `completion` for /v1/completions. */
  kind: 'chat' | 'completion';
  model: string;
  /** The prompt as one text: the chat template applied to the messages, or the completion prompt. */
  promptText: string;
  /** `max_completion_tokens` ?? `max_tokens`; undefined when neither is given. */
  maxTokens: number | undefined;
  stream: boolean;
  /** `stream_options.include_usage`. */
  includeUsage: boolean;
}

/** An embeddings request. */
export interface EmbeddingRequest {
  model: string;
  /** Input texts in order. */
  inputs: string[];
  encoding: 'float' | 'base64';
  /** Requested vector length, or undefined for the profile's `embedding_dim`. */
  dimensions: number | undefined;
}

type Obj = Record<string, unknown>;

/** Parses a JSON request body that must be an object; throws `InvalidRequestError` otherwise. */
export function parseJsonObject(body: Buffer): Obj {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    throw new InvalidRequestError('request body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidRequestError('request body must be a JSON object');
  }
  return value as Obj;
}

function requireModel(b: Obj): string {
  if (typeof b['model'] !== 'string' || b['model'] === '') {
    throw new InvalidRequestError('"model" is required and must be a string', 'model');
  }
  return b['model'];
}

function optionalPositiveInt(b: Obj, key: string): number | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new InvalidRequestError(`"${key}" must be a positive integer`, key);
  }
  return v;
}

function readStreaming(b: Obj): { stream: boolean; includeUsage: boolean } {
  const stream = b['stream'];
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') {
    throw new InvalidRequestError('"stream" must be a boolean', 'stream');
  }
  const opts = b['stream_options'];
  if (opts === undefined || opts === null) return { stream: stream === true, includeUsage: false };
  if (stream !== true) {
    throw new InvalidRequestError('"stream_options" is only allowed when "stream" is true', 'stream_options');
  }
  if (typeof opts !== 'object' || Array.isArray(opts)) {
    throw new InvalidRequestError('"stream_options" must be an object', 'stream_options');
  }
  const include = (opts as Obj)['include_usage'];
  if (include !== undefined && include !== null && typeof include !== 'boolean') {
    throw new InvalidRequestError('"stream_options.include_usage" must be a boolean', 'stream_options');
  }
  return { stream: true, includeUsage: include === true };
}

function rejectMultipleChoices(b: Obj): void {
  const n = b['n'];
  if (n !== undefined && n !== null && n !== 1) {
    throw new InvalidRequestError('the simulator supports only "n": 1', 'n');
  }
}

function messageText(m: Obj, i: number): string {
  const content = m['content'];
  let text = '';
  if (typeof content === 'string') text = content;
  else if (Array.isArray(content)) {
    for (const part of content as unknown[]) {
      if (typeof part !== 'object' || part === null) {
        throw new InvalidRequestError(`messages[${i}].content parts must be objects`, 'messages');
      }
      const p = part as Obj;
      // Non-text parts (images, audio) still cost prompt tokens and change the output: hash them in.
      text += p['type'] === 'text' && typeof p['text'] === 'string' ? p['text'] : JSON.stringify(p);
    }
  } else if (content !== undefined && content !== null) {
    throw new InvalidRequestError(`messages[${i}].content must be a string, an array or null`, 'messages');
  }
  if (m['tool_calls'] !== undefined) text += JSON.stringify(m['tool_calls']);
  return text;
}

/** Validates a /v1/chat/completions body. */
export function parseChatRequest(b: Obj): GenerateRequest {
  const model = requireModel(b);
  const raw = b['messages'];
  if (!Array.isArray(raw) || raw.length === 0) {
    throw new InvalidRequestError('"messages" must be a non-empty array', 'messages');
  }
  const messages: PromptMessage[] = [];
  (raw as unknown[]).forEach((m, i) => {
    if (typeof m !== 'object' || m === null || typeof (m as Obj)['role'] !== 'string') {
      throw new InvalidRequestError(`messages[${i}] must be an object with a string "role"`, 'messages');
    }
    messages.push({ role: (m as Obj)['role'] as string, content: messageText(m as Obj, i) });
  });
  rejectMultipleChoices(b);
  const maxTokens = optionalPositiveInt(b, 'max_completion_tokens') ?? optionalPositiveInt(b, 'max_tokens');
  return { kind: 'chat', model, promptText: chatPromptText(messages), maxTokens, ...readStreaming(b) };
}

/** Validates a /v1/completions body (a string prompt, or an array holding one string). */
export function parseCompletionRequest(b: Obj): GenerateRequest {
  const model = requireModel(b);
  let prompt = b['prompt'];
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string') prompt = prompt[0];
  if (typeof prompt !== 'string') {
    throw new InvalidRequestError(
      '"prompt" must be a string (token-id prompts and batched prompts are not supported by the simulator)',
      'prompt',
    );
  }
  rejectMultipleChoices(b);
  const maxTokens = optionalPositiveInt(b, 'max_tokens');
  return { kind: 'completion', model, promptText: prompt, maxTokens, ...readStreaming(b) };
}

/** Validates a /v1/embeddings body: `input` is a non-empty string or a non-empty array of them. */
export function parseEmbeddingRequest(b: Obj): EmbeddingRequest {
  const model = requireModel(b);
  const input = b['input'];
  let inputs: string[];
  if (typeof input === 'string') inputs = [input];
  else if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === 'string')) {
    inputs = input;
  } else if (Array.isArray(input) && input.length > 0) {
    throw new InvalidRequestError(
      '"input" must be a string or an array of strings (token arrays are not supported by the simulator)',
      'input',
    );
  } else {
    throw new InvalidRequestError('"input" must be a non-empty string or array of strings', 'input');
  }
  if (inputs.some((s) => s === ''))
    throw new InvalidRequestError('"input" must not contain empty strings', 'input');
  const fmt = b['encoding_format'];
  if (fmt !== undefined && fmt !== null && fmt !== 'float' && fmt !== 'base64') {
    throw new InvalidRequestError('"encoding_format" must be "float" or "base64"', 'encoding_format');
  }
  const dimensions = optionalPositiveInt(b, 'dimensions');
  if (dimensions !== undefined && dimensions > 16384) {
    throw new InvalidRequestError('"dimensions" must be at most 16384', 'dimensions');
  }
  return { model, inputs, encoding: fmt === 'base64' ? 'base64' : 'float', dimensions };
}
