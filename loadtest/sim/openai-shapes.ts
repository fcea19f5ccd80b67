/**
 * Response bodies in OpenAI's exact shapes: chat completions and their stream chunks, text
 * completions and theirs, embeddings, and the model list. Pure functions from values to objects;
 * serialising and writing them is the caller's job.
 */

import type { SimProfile } from './profile.js';

/** OpenAI `usage` of a generation. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Builds a `usage` object. */
export function usage(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

/** Identity of one response, shared by every chunk of a stream. */
export interface ResponseMeta {
  id: string;
  /** Unix seconds. */
  created: number;
  model: string;
}

/** A non-streamed `chat.completion`. */
export function chatCompletionBody(
  meta: ResponseMeta,
  content: string,
  finishReason: string,
  u: Usage,
): object {
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: null, tool_calls: [] },
        logprobs: null,
        finish_reason: finishReason,
      },
    ],
    usage: u,
  };
}

/** A non-streamed `text_completion`. */
export function completionBody(meta: ResponseMeta, text: string, finishReason: string, u: Usage): object {
  return {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
    usage: u,
  };
}

/**
 * One `chat.completion.chunk` carrying one token. The first chunk of a stream also carries
 * `delta.role`; the last carries `finish_reason`. With include_usage every chunk has `usage: null`.
 */
export function chatChunk(
  meta: ResponseMeta,
  piece: string,
  first: boolean,
  finishReason: string | null,
  includeUsage: boolean,
): object {
  const delta = first ? { role: 'assistant', content: piece } : { content: piece };
  const chunk: Record<string, unknown> = {
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
  if (includeUsage) chunk['usage'] = null;
  return chunk;
}

/** One streamed `text_completion` chunk carrying one token. */
export function completionChunk(
  meta: ResponseMeta,
  piece: string,
  finishReason: string | null,
  includeUsage: boolean,
): object {
  const chunk: Record<string, unknown> = {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, text: piece, logprobs: null, finish_reason: finishReason }],
  };
  if (includeUsage) chunk['usage'] = null;
  return chunk;
}

/** The final usage-only chunk sent when `stream_options.include_usage` is true: empty `choices`. */
export function usageChunk(meta: ResponseMeta, kind: 'chat' | 'completion', u: Usage): object {
  return {
    id: meta.id,
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [],
    usage: u,
  };
}

/** An embeddings list; each entry's `embedding` is a number array or a base64 string. */
export function embeddingsBody(
  model: string,
  embeddings: (number[] | string)[],
  promptTokens: number,
): object {
  return {
    object: 'list',
    data: embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding })),
    model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
}

/** The `/v1/models` list: the profile's chat model and embedding model. */
export function modelsBody(profile: SimProfile, created: number): object {
  const entry = (id: string): object => ({
    id,
    object: 'model',
    created,
    owned_by: 'sluice-sim',
    root: id,
    parent: null,
    max_model_len: profile.max_model_len,
  });
  return { object: 'list', data: [entry(profile.chat_model), entry(profile.embedding_model)] };
}
