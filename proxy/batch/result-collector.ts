/**
 * A sink that gathers the results of several items into an array in input order and resolves one
 * promise when the last arrives: the convenience for callers that want promises (the synchronous
 * batch endpoint, tests). Allocates one closure per collector, never per item.
 */

import type { BatchItemSink } from './batch-item.js';

/** One item's result. */
export interface BatchResult {
  /** HTTP status for this item. */
  status: number;
  /** Its body (OpenAI-shaped error body when it failed). */
  body: Buffer;
  /** Upstream calls made for it. */
  attempts: number;
}

/** Collects `count` results; `tag` is the position. `done` resolves with them in input order. */
export class ResultCollector implements BatchItemSink {
  readonly results: BatchResult[];
  readonly done: Promise<BatchResult[]>;
  private remaining: number;
  private resolve!: (results: BatchResult[]) => void;

  constructor(count: number) {
    this.results = new Array<BatchResult>(count);
    this.remaining = count;
    this.done = new Promise((resolve) => {
      this.resolve = resolve;
    });
    if (count === 0) this.resolve(this.results);
  }

  onBatchResult(tag: number, status: number, body: Buffer, attempts: number): void {
    if (this.results[tag] !== undefined) throw new Error(`invariant broken: result ${tag} delivered twice`);
    this.results[tag] = { status, body, attempts };
    if (--this.remaining === 0) this.resolve(this.results);
  }
}
