/**
 * One unit of work inside a simulated node: a generation (prefill, then one token per decode step)
 * or an embeddings batch (a fixed slot occupancy). The engine moves jobs between states; the HTTP
 * handler that owns a job hears about it only through its `JobSink`.
 */

/** Where a job is in its life. */
export const JobState = {
  /** In the FIFO queue, holding no slot. */
  waiting: 'waiting',
  /** Holds a slot; uncached prompt tokens are being computed. */
  prefill: 'prefill',
  /** Holds a slot; one output token per decode step (or per fixed gap). */
  decode: 'decode',
  /** Holds a slot for an embeddings batch's duration. */
  embed: 'embed',
  /** Finished normally; the sink got `onDone`. */
  done: 'done',
  /** Cancelled by its owner or dropped by an engine reset. */
  cancelled: 'cancelled',
} as const;
export type JobState = (typeof JobState)[keyof typeof JobState];

/** Receives a job's progress. Calls happen synchronously from engine timers, never after cancellation. */
export interface JobSink {
  /**
   * The job took a slot: its modelled time runs from now. Optional; an embeddings exchange builds its
   * answer here, so that the work overlaps the modelled wait instead of following it.
   */
  onStart?(job: SimJob): void;
  /** Output token `index` (0-based) of a generate job has been produced. */
  onToken(job: SimJob, index: number): void;
  /** The job completed: every token emitted, or the embeddings batch computed. */
  onDone(job: SimJob): void;
  /** The engine was reset (crash, shutdown) and dropped the job; the owner must fail its request. */
  onAbort(job: SimJob): void;
}

/** What a generate job needs to know about its request. */
export interface GenerateSpec {
  /** Estimated prompt tokens (`estimateTokens` of the prompt text). */
  promptTokens: number;
  /** Output tokens to produce (the request's max_tokens). */
  outputTokens: number;
  /** 0: tokens paced by decode steps; > 0: fixed gap between tokens in real ms (x-sim-chunk-delay-ms). */
  tokenGapMs: number;
  /** Prefix-cache block keys of prompt text followed by output text. */
  keys: number[];
  /** How many of `keys` lie wholly inside the prompt. */
  promptBlocks: number;
}

/** A job. Fields are public for the engine; owners read `state` and the timing fields only. */
export class SimJob {
  state: JobState = JobState.waiting;
  /** Uncached prompt tokens still to prefill. */
  prefillLeft = 0;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens = 0;
  /** Output tokens produced so far. */
  generated = 0;
  /** KV tokens reserved while running (prompt + output). */
  reservedTokens = 0;
  /** Monotonic ms when the job got a slot; 0 while waiting. */
  admittedAt = 0;
  /** Monotonic ms of the first output token (generate) or completion (embed); 0 before. */
  firstTokenAt = 0;
  /** The job's own timer (embed duration or fixed token gap), if any. */
  timer: NodeJS.Timeout | null = null;
  /** An embeddings job: the monotonic ms its computation ends in the model. */
  embedDueAt = 0;

  private constructor(
    readonly kind: 'generate' | 'embed',
    readonly sink: JobSink,
    readonly promptTokens: number,
    readonly outputTokens: number,
    readonly tokenGapMs: number,
    readonly keys: number[],
    readonly promptBlocks: number,
    /** Embeddings batch cost in model ms (before time scaling); 0 for generate jobs. */
    readonly embedMs: number,
    /** Monotonic ms when the job was submitted. */
    readonly enqueuedAt: number,
  ) {}

  /** A generation job, queued at `now`. */
  static generate(spec: GenerateSpec, sink: JobSink, now: number): SimJob {
    return new SimJob(
      'generate',
      sink,
      spec.promptTokens,
      spec.outputTokens,
      spec.tokenGapMs,
      spec.keys,
      spec.promptBlocks,
      0,
      now,
    );
  }

  /** An embeddings job costing `embedMs` model ms for `promptTokens` input tokens, queued at `now`. */
  static embed(embedMs: number, promptTokens: number, sink: JobSink, now: number): SimJob {
    return new SimJob('embed', sink, promptTokens, 0, 0, [], 0, embedMs, now);
  }
}
