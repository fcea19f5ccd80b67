/**
 * One embeddings request on a simulated node: queues an embeddings job that holds a slot for
 * `embedding_fixed_ms + embedding_per_item_ms × n`, then answers with one deterministic vector per
 * input in input order. The answer is built when the job takes its slot, while the modelled time
 * runs, so it goes out at the model's end. Faults decided before it starts are not its business.
 */

import type { ServerResponse } from 'node:http';
import type { GenerateContext } from './generate-exchange.js';
import { failEngineRestart, sendJsonText } from './http-io.js';
import { Outcome } from './node-counters.js';
import { InvalidRequestError, type EmbeddingRequest } from './openai-request.js';
import { embeddingsBody } from './openai-shapes.js';
import { embeddingToBase64, embeddingVector, estimateTokens } from './outputs.js';
import { JobState, type JobSink, type SimJob } from './sim-job.js';

/** An embeddings request in flight: create, then `start()`; it answers the request by itself. */
export class EmbeddingsExchange implements JobSink {
  private readonly promptTokens: number;
  private job: SimJob | null = null;
  private completed = false;
  /** The 200 answer's JSON as UTF-8, built once the job holds a slot; null before. */
  private body: Buffer | null = null;

  /** Throws `InvalidRequestError` when the request has more inputs than the profile allows. */
  constructor(
    private readonly ctx: GenerateContext,
    private readonly request: EmbeddingRequest,
    private readonly res: ServerResponse,
  ) {
    const max = ctx.profile.embedding_max_items;
    if (request.inputs.length > max) {
      throw new InvalidRequestError(
        `"input" has ${request.inputs.length} items; at most ${max} are allowed`,
        'input',
      );
    }
    let tokens = 0;
    for (const text of request.inputs) tokens += estimateTokens(text);
    this.promptTokens = tokens;
  }

  /** Queues the embeddings job. */
  start(): void {
    this.res.once('close', this.onClose);
    this.job = this.ctx.engine.submitEmbedding(this.request.inputs.length, this.promptTokens, this);
  }

  /**
   * Engine callback: the job holds a slot and its modelled time runs. Builds the vectors and their
   * JSON now (128 inputs of 768 dimensions take 10-30 ms of CPU): done in `onDone`, after the
   * modelled wait, they made the answer late by that much.
   */
  onStart(_job: SimJob): void {
    this.body ??= this.answer();
  }

  /** Not called for embeddings jobs. */
  onToken(): void {}

  /** Engine callback: the batch is computed; sends the vectors. */
  onDone(_job: SimJob): void {
    const body = this.body ?? this.answer();
    this.body = null;
    this.completed = true;
    sendJsonText(this.res, 200, body);
    this.ctx.counters.record('embedding', 200);
  }

  /** Engine callback: the engine was reset (crash or shutdown); the request fails. */
  onAbort(_job: SimJob): void {
    if (this.completed) return;
    this.completed = true;
    this.ctx.counters.record('embedding', failEngineRestart(this.res));
  }

  /** The 200 answer's JSON as UTF-8 bytes (encoding 2 MB takes a millisecond or two, overlapped too). */
  private answer(): Buffer {
    const dim = this.request.dimensions ?? this.ctx.profile.embedding_dim;
    const base64 = this.request.encoding === 'base64';
    const out = this.request.inputs.map((text) => {
      const v = embeddingVector(text, dim);
      return base64 ? embeddingToBase64(v) : Array.from(v);
    });
    return Buffer.from(JSON.stringify(embeddingsBody(this.request.model, out, this.promptTokens)));
  }

  private readonly onClose = (): void => {
    if (this.completed) return;
    const job = this.job;
    if (job !== null && job.state !== JobState.done) this.ctx.engine.cancel(job);
    this.ctx.counters.record('embedding', Outcome.aborted);
  };
}
