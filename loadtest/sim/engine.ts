/**
 * The simulated GPU scheduler: `max_running` sequence slots, a FIFO queue behind them, and a step
 * loop driven by timers that prices each step with the profile's prefill and decode model, in the
 * manner of vLLM's continuous batching with chunked prefill. It knows nothing about HTTP.
 */

import { nowMs } from '../../proxy/lifecycle/clock.js';
import { FifoQueue } from './fifo-queue.js';
import { PrefixCache } from './prefix-cache.js';
import type { SimProfile } from './profile.js';
import { JobState, SimJob, type GenerateSpec, type JobSink } from './sim-job.js';
import { stepCostMs } from './step-cost.js';
import { StepLoop, type Stepper } from './step-loop.js';

/** Counters and gauges of one engine; times in ms, tokens estimated. */
export interface EngineStats {
  /** Jobs holding a slot now (generate and embed). */
  running: number;
  /** Jobs queued for a slot now. */
  waiting: number;
  /** Jobs finished normally since start. */
  completed: number;
  /** Jobs cancelled by their owner (client gone) or dropped by a reset. */
  cancelled: number;
  /** Prompt tokens prefilled (generate) or embedded. */
  promptTokens: number;
  /** Output tokens produced. */
  generationTokens: number;
  /** Prompt tokens looked up in the prefix cache (vLLM `prefix_cache_queries`). */
  cacheQueryTokens: number;
  /** Of those, tokens found in whole cached leading blocks (vLLM `prefix_cache_hits`). */
  cacheHitTokens: number;
  /** Tokens held by the prefix cache now. */
  cachedTokens: number;
  /** Fraction of the KV pool used by running sequences' context, 0..1 (vLLM `gpu_cache_usage_perc`). */
  kvUsage: number;
  /** Sum over jobs of time spent holding a slot, including jobs still running. */
  busySlotMs: number;
}

/**
 * One node's engine. Work happens in steps: at a step's start, waiting jobs are admitted FIFO while a
 * slot, KV room and the step's token budget allow; the step then lasts `stepCostMs` times
 * `timeScale()` (time_scale × slowdown ÷ speed factor). At its end every decoding sequence emits one
 * token and every sequence whose prefill completed emits its first token.
 */
export class SimEngine implements Stepper {
  private readonly waitingQueue = new FifoQueue<SimJob>();
  /** Jobs holding a slot, in admission order (a Set iterates in insertion order). */
  private readonly running = new Set<SimJob>();
  private readonly cache: PrefixCache;
  private waitingCount = 0;
  private generateRunning = 0;
  private reservedTokens = 0;
  private contextTokens = 0;
  private readonly loop = new StepLoop(this);
  private readonly stepDecode: SimJob[] = [];
  private readonly stepPrefill: SimJob[] = [];
  private readonly stepChunks: number[] = [];
  private readonly counters = {
    completed: 0,
    cancelled: 0,
    promptTokens: 0,
    generationTokens: 0,
    cacheQueryTokens: 0,
    cacheHitTokens: 0,
    busySlotMs: 0,
  };

  /** `timeScale()` is read at each step's start and multiplies its modelled duration. */
  constructor(
    private readonly profile: SimProfile,
    private readonly timeScale: () => number,
  ) {
    this.cache = new PrefixCache(profile.block_tokens, profile.kv_capacity_tokens);
  }

  /** Queues a generation; tokens arrive through `sink`. The returned job is the handle for `cancel`. */
  submitGenerate(spec: GenerateSpec, sink: JobSink): SimJob {
    return this.enqueue(SimJob.generate(spec, sink, nowMs()));
  }

  /** Queues an embeddings batch of `items` inputs totalling `promptTokens`; `sink.onDone` when computed. */
  submitEmbedding(items: number, promptTokens: number, sink: JobSink): SimJob {
    const ms = this.profile.embedding_fixed_ms + this.profile.embedding_per_item_ms * items;
    return this.enqueue(SimJob.embed(ms, promptTokens, sink, nowMs()));
  }

  /** Withdraws a job (its client went away): frees its slot or queue place. No sink call follows. */
  cancel(job: SimJob): void {
    if (job.state === JobState.waiting) {
      job.state = JobState.cancelled;
      this.waitingCount--;
      this.counters.cancelled++;
    } else if (
      job.state === JobState.prefill ||
      job.state === JobState.decode ||
      job.state === JobState.embed
    ) {
      this.release(job, nowMs());
      job.state = JobState.cancelled;
      this.counters.cancelled++;
      this.kick();
    }
  }

  /** Drops all work and the prefix cache, as a crashed GPU process would; each job's sink gets `onAbort`. */
  reset(): void {
    this.loop.stop();
    const now = nowMs();
    const victims: SimJob[] = [...this.running];
    for (const job of victims) this.release(job, now);
    for (const job of this.waitingQueue.drain()) if (job.state === JobState.waiting) victims.push(job);
    this.waitingCount = 0;
    this.cache.clear();
    for (const job of victims) {
      job.state = JobState.cancelled;
      this.counters.cancelled++;
    }
    for (const job of victims) job.sink.onAbort(job);
  }

  /** Current counters and gauges. */
  stats(): EngineStats {
    const now = nowMs();
    let busy = this.counters.busySlotMs;
    for (const job of this.running) busy += now - job.admittedAt;
    return {
      running: this.running.size,
      waiting: this.waitingCount,
      completed: this.counters.completed,
      cancelled: this.counters.cancelled,
      promptTokens: this.counters.promptTokens,
      generationTokens: this.counters.generationTokens,
      cacheQueryTokens: this.counters.cacheQueryTokens,
      cacheHitTokens: this.counters.cacheHitTokens,
      cachedTokens: this.cache.tokens,
      kvUsage: Math.min(1, this.contextTokens / this.profile.kv_capacity_tokens),
      busySlotMs: busy,
    };
  }

  private enqueue(job: SimJob): SimJob {
    this.waitingQueue.push(job);
    this.waitingCount++;
    this.kick();
    return job;
  }

  private kick(): void {
    this.loop.kick();
  }

  /** Stepper: generation waits for the step boundary; an embeddings batch at the head may take a free slot now. */
  betweenSteps(now: number): void {
    this.admit(now, 0);
  }

  /** Stepper: plans the step starting at `start`; returns its end, or -1 when there is nothing to do. */
  beginStep(start: number): number {
    const p = this.profile;
    this.stepDecode.length = 0;
    this.stepPrefill.length = 0;
    this.stepChunks.length = 0;
    let budget = p.max_batched_tokens > 0 ? p.max_batched_tokens : Number.POSITIVE_INFINITY;
    let decoders = 0;
    let decodeContext = 0;
    for (const job of this.running) {
      if (job.state !== JobState.decode) continue;
      decoders++;
      decodeContext += job.promptTokens + job.generated;
      budget--;
      if (job.tokenGapMs === 0) this.stepDecode.push(job);
    }
    for (const job of this.running) {
      if (job.state === JobState.prefill && budget > 0) budget -= this.planPrefill(job, budget);
    }
    this.admit(start, budget);
    let prefillTokens = 0;
    for (const chunk of this.stepChunks) prefillTokens += chunk;
    if (this.stepDecode.length === 0 && prefillTokens === 0) return -1;
    // Token-gap-paced sequences need no step of their own but still weigh on the batch (B).
    const decodingInStep = this.stepDecode.length > 0 ? decoders : 0;
    const ms = stepCostMs(p, { prefillTokens, decoders: decodingInStep, decodeContextTokens: decodeContext });
    return start + ms * this.timeScale();
  }

  private planPrefill(job: SimJob, budget: number): number {
    const chunk = Math.min(job.prefillLeft, budget);
    this.stepPrefill.push(job);
    this.stepChunks.push(chunk);
    return chunk;
  }

  /**
   * Admits from the queue head while a slot is free. Embeddings need only a slot; a generation also
   * needs KV room for prompt + output (unless nothing else generates) and step budget. FCFS: a head
   * that cannot start blocks those behind it, as in vLLM.
   */
  private admit(now: number, budget: number): void {
    const p = this.profile;
    while (this.running.size < p.max_running) {
      const job = this.peekWaiting();
      if (job === undefined) return;
      if (job.kind === 'embed') {
        // No earlier than its arrival: a slot freed in the model's past serves only what waited.
        const start = Math.max(now, job.enqueuedAt);
        this.takeHead(job, start);
        job.state = JobState.embed;
        // Timed from `now` in the model (a slot freed by an embedding late on its timer starts the
        // next one at the earlier one's end): the timer's lateness does not add up batch after batch.
        job.embedDueAt = start + job.embedMs * this.timeScale();
        job.timer = setTimeout(this.onEmbedTimer, Math.max(0, Math.ceil(job.embedDueAt - nowMs())), job);
        job.sink.onStart?.(job);
        continue;
      }
      if (budget <= 0) return;
      const need = job.promptTokens + job.outputTokens;
      if (this.generateRunning > 0 && this.reservedTokens + need > p.kv_capacity_tokens) return;
      this.takeHead(job, now);
      this.generateRunning++;
      job.reservedTokens = need;
      this.reservedTokens += need;
      this.contextTokens += job.promptTokens;
      this.cache.resize(p.kv_capacity_tokens - this.reservedTokens);
      let hitTokens = this.cache.match(job.keys, job.promptBlocks) * p.block_tokens;
      // At least one prompt token is always computed: it yields the first output token's logits.
      if (hitTokens >= job.promptTokens) hitTokens = Math.max(0, hitTokens - p.block_tokens);
      this.counters.cacheQueryTokens += job.promptTokens;
      this.counters.cacheHitTokens += hitTokens;
      job.cachedTokens = hitTokens;
      job.prefillLeft = Math.max(1, job.promptTokens - hitTokens);
      job.state = JobState.prefill;
      budget -= this.planPrefill(job, budget);
      job.sink.onStart?.(job);
    }
  }

  private peekWaiting(): SimJob | undefined {
    let job = this.waitingQueue.peek();
    while (job !== undefined && job.state !== JobState.waiting) {
      this.waitingQueue.shift();
      job = this.waitingQueue.peek();
    }
    return job;
  }

  private takeHead(job: SimJob, now: number): void {
    this.waitingQueue.shift();
    this.waitingCount--;
    job.admittedAt = now;
    this.running.add(job);
  }

  /** Stepper: the planned step is over; emit its tokens. */
  endStep(): void {
    const now = nowMs();
    for (const job of this.stepDecode) if (job.state === JobState.decode) this.emitToken(job, now);
    for (let i = 0; i < this.stepPrefill.length; i++) {
      const job = this.stepPrefill[i] as SimJob;
      if (job.state !== JobState.prefill) continue;
      job.prefillLeft -= this.stepChunks[i] as number;
      if (job.prefillLeft > 0) continue;
      this.counters.promptTokens += job.promptTokens;
      this.cache.insert(job.keys, job.promptBlocks);
      job.state = JobState.decode;
      this.emitToken(job, now);
      if (job.state === JobState.decode && job.tokenGapMs > 0) {
        job.timer = setTimeout(this.onGapTimer, job.tokenGapMs, job);
      }
    }
    this.stepDecode.length = 0;
    this.stepPrefill.length = 0;
    this.stepChunks.length = 0;
  }

  private emitToken(job: SimJob, now: number): void {
    const index = job.generated++;
    if (index === 0) job.firstTokenAt = now;
    this.contextTokens++;
    this.counters.generationTokens++;
    job.sink.onToken(job, index);
    if (job.state === JobState.decode && job.generated >= job.outputTokens) this.finish(job, now);
  }

  private readonly onGapTimer = (job: SimJob): void => {
    job.timer = null;
    if (job.state !== JobState.decode) return;
    this.emitToken(job, nowMs());
    if (job.state === JobState.decode) job.timer = setTimeout(this.onGapTimer, job.tokenGapMs, job);
  };

  private readonly onEmbedTimer = (job: SimJob): void => {
    job.timer = null;
    if (job.state !== JobState.embed) return;
    const now = nowMs();
    if (now < job.embedDueAt) {
      // Timers count whole milliseconds: one may fire before the model's end.
      job.timer = setTimeout(this.onEmbedTimer, Math.ceil(job.embedDueAt - now), job);
      return;
    }
    job.firstTokenAt = now;
    this.counters.promptTokens += job.promptTokens;
    this.finish(job, now);
    // The freed slot goes to a queued embedding at once, from the model's end of this one (a
    // generation waits for the next step as before).
    this.admit(Math.min(now, job.embedDueAt), 0);
  };

  private finish(job: SimJob, now: number): void {
    this.release(job, now);
    job.state = JobState.done;
    this.counters.completed++;
    if (job.kind === 'generate') this.cache.insert(job.keys, job.keys.length);
    this.kick();
    job.sink.onDone(job);
  }

  /** Returns a running job's slot and KV reservation. */
  private release(job: SimJob, now: number): void {
    if (!this.running.delete(job)) return;
    if (job.timer !== null) clearTimeout(job.timer);
    job.timer = null;
    this.counters.busySlotMs += now - job.admittedAt;
    if (job.kind === 'generate') {
      this.generateRunning--;
      this.reservedTokens -= job.reservedTokens;
      this.contextTokens -= job.promptTokens + job.generated;
      this.cache.resize(this.profile.kv_capacity_tokens - this.reservedTokens);
    }
  }
}
