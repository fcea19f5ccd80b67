/**
 * One chat or completions request on a simulated node, from validated request to the last byte:
 * submits a generate job, turns its tokens into SSE chunks or one JSON body, and cancels the job
 * when the client goes away. Faults decided before it starts (stall, error) are not its business.
 */

import type { ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { SimEngine } from './engine.js';
import { failEngineRestart, sendJson } from './http-io.js';
import { NodeCounters, Outcome } from './node-counters.js';
import { InvalidRequestError, type GenerateRequest } from './openai-request.js';
import {
  chatChunk,
  chatCompletionBody,
  completionBody,
  completionChunk,
  usage,
  usageChunk,
  type ResponseMeta,
} from './openai-shapes.js';
import { CHARS_PER_TOKEN, estimateTokens, generatedWords, tokenPiece } from './outputs.js';
import { blockKeys } from './prefix-cache.js';
import type { SimProfile } from './profile.js';
import { JobState, type JobSink, type SimJob } from './sim-job.js';
import { SseWriter } from './sse-writer.js';

/** What an exchange needs from its node. */
export interface GenerateContext {
  engine: SimEngine;
  profile: SimProfile;
  counters: NodeCounters;
}

/** Output length for a request, or throws the 400 vLLM gives when prompt + output exceed the context. */
export function resolveMaxTokens(
  profile: SimProfile,
  promptTokens: number,
  requested: number | undefined,
): number {
  const max = profile.max_model_len;
  if (requested === undefined) {
    if (promptTokens >= max) {
      throw new InvalidRequestError(
        `This model's maximum context length is ${max} tokens. However, your prompt has ${promptTokens} tokens.`,
        'messages',
      );
    }
    return Math.min(profile.default_max_tokens, max - promptTokens);
  }
  if (promptTokens + requested > max) {
    throw new InvalidRequestError(
      `This model's maximum context length is ${max} tokens. However, you requested ${promptTokens + requested} ` +
        `tokens (${promptTokens} in the prompt, ${requested} in the completion).`,
      'max_tokens',
    );
  }
  return requested;
}

/**
 * A generation in flight. Create it, then call `start()`; it answers the request by itself.
 * `dropAfter` >= 0 cuts a stream after that many chunks; `tokenGapMs` > 0 paces tokens by a fixed gap.
 */
export class GenerateExchange implements JobSink {
  private readonly words: string[];
  private readonly promptTokens: number;
  private readonly maxTokens: number;
  private readonly meta: ResponseMeta;
  private readonly writer: SseWriter | null;
  private job: SimJob | null = null;
  private completed = false;

  /** Throws `InvalidRequestError` when the request exceeds the model's context length. */
  constructor(
    private readonly ctx: GenerateContext,
    private readonly request: GenerateRequest,
    private readonly res: ServerResponse,
    dropAfter: number,
    private readonly tokenGapMs: number,
  ) {
    this.promptTokens = estimateTokens(request.promptText);
    this.maxTokens = resolveMaxTokens(ctx.profile, this.promptTokens, request.maxTokens);
    this.words = generatedWords(request.promptText, this.maxTokens);
    const prefix = request.kind === 'chat' ? 'chatcmpl-' : 'cmpl-';
    this.meta = {
      id: prefix + randomUUID().replaceAll('-', ''),
      created: Math.floor(Date.now() / 1000),
      model: request.model,
    };
    this.writer = request.stream ? new SseWriter(res, dropAfter) : null;
  }

  /** Queues the job on the engine and, for streams with `stream_head: immediate`, sends the head now. */
  start(): void {
    const text = this.request.promptText;
    const keys = blockKeys(text + this.words.join(' '), this.ctx.profile.block_tokens);
    const promptBlocks = Math.floor(text.length / (this.ctx.profile.block_tokens * CHARS_PER_TOKEN));
    this.res.once('close', this.onClose);
    if (this.writer !== null && this.ctx.profile.stream_head === 'immediate') this.writer.start();
    this.job = this.ctx.engine.submitGenerate(
      {
        promptTokens: this.promptTokens,
        outputTokens: this.maxTokens,
        tokenGapMs: this.tokenGapMs,
        keys,
        promptBlocks,
      },
      this,
    );
  }

  /** Engine callback: token `index` is ready. */
  onToken(_job: SimJob, index: number): void {
    if (this.writer === null) return;
    const piece = tokenPiece(this.words, index);
    const finish = index === this.maxTokens - 1 ? 'length' : null;
    const include = this.request.includeUsage;
    const chunk =
      this.request.kind === 'chat'
        ? chatChunk(this.meta, piece, index === 0, finish, include)
        : completionChunk(this.meta, piece, finish, include);
    this.writer.event(JSON.stringify(chunk));
  }

  /** Engine callback: all tokens produced; completes the response. */
  onDone(_job: SimJob): void {
    const u = usage(this.promptTokens, this.maxTokens);
    if (this.writer !== null) {
      if (this.writer.done) return; // dropped or the client left; onClose records it
      if (this.request.includeUsage)
        this.writer.event(JSON.stringify(usageChunk(this.meta, this.request.kind, u)));
      if (this.writer.done) return;
      this.completed = true;
      this.writer.end();
    } else {
      const text = this.words.join(' ');
      const body =
        this.request.kind === 'chat'
          ? chatCompletionBody(this.meta, text, 'length', u)
          : completionBody(this.meta, text, 'length', u);
      this.completed = true;
      sendJson(this.res, 200, body);
    }
    this.ctx.counters.record(this.request.kind, 200);
  }

  /** Engine callback: the engine was reset (crash or shutdown); the request fails. */
  onAbort(_job: SimJob): void {
    if (this.completed) return;
    this.completed = true;
    this.ctx.counters.record(this.request.kind, failEngineRestart(this.res));
  }

  private readonly onClose = (): void => {
    if (this.completed) return;
    const job = this.job;
    if (job !== null && job.state !== JobState.done) this.ctx.engine.cancel(job);
    const dropped = this.writer !== null && this.writer.dropped;
    this.ctx.counters.record(this.request.kind, dropped ? Outcome.dropped : Outcome.aborted);
  };
}
