/**
 * `native` mode: a closed window becomes one upstream call whose body carries every item (built by
 * the codec), and the answer is split back per item. A combined call answered 4xx is assumed to be
 * one item's fault and is re-sent as single-item calls at once; a 5xx or transport failure retries
 * the items it carried, one by one, after backoff, so a poison item cannot fail its neighbours twice.
 */

import { BatchDispatcher } from './batch-dispatcher.js';
import type { BatchItem } from './batch-item.js';
import type { BatchRun } from './batch-run.js';
import type { BatchTransport } from './batch-transport.js';
import { codecFailure, splitFailure } from './item-errors.js';
import { isRetryableStatus } from './retry-policy.js';

/** The native mode. Created by the micro-batcher. */
export class NativeDispatcher extends BatchDispatcher {
  dispatch(items: BatchItem[], run: BatchRun): void {
    if (items.length === 1) {
      const only = items[0] as BatchItem;
      only.run = run;
      void this.callOne(only);
      return;
    }
    void this.callMany(items, run);
  }

  protected resend(item: BatchItem): void {
    void this.callOne(item);
  }

  /** One call carrying `items` (≥ 2). Never rejects. */
  private async callMany(items: BatchItem[], run: BatchRun): Promise<void> {
    const transport = this.pick();
    if (transport === null) {
      run.callDone(items.length);
      this.noNode(items);
      return;
    }
    const bodies = items.map(bodyOf);
    let combined: Buffer;
    try {
      combined = this.ctx.codec.encode(bodies);
    } catch (err) {
      run.callDone(items.length);
      const f = codecFailure(this.ctx.options.route, err);
      this.fail(items, f.status, f.body, f.retryable);
      return;
    }
    for (const item of items) item.attempts++;
    this.ctx.stats.upstreamCalls++;
    let status: number;
    let answer: Buffer;
    try {
      ({ status, body: answer } = await transport.send(combined, items.length));
    } catch (err) {
      run.callDone(items.length);
      this.transportError(items, err);
      return;
    }
    run.callDone(items.length);
    if (status >= 200 && status < 300) {
      const parts = this.ctx.codec.split(answer, bodies);
      if (parts === null) {
        const f = splitFailure(this.ctx.options.route);
        this.fail(items, f.status, f.body, f.retryable);
        return;
      }
      for (let i = 0; i < items.length; i++) this.settle(items[i] as BatchItem, status, parts[i] as Buffer);
    } else if (isRetryableStatus(status)) {
      this.fail(items, status, answer, true);
    } else {
      // Which item is at fault is unknown: each goes alone, and that call is its real first attempt.
      this.ctx.stats.fallbacks++;
      for (const item of items) {
        item.attempts--;
        void this.callOne(item);
      }
    }
  }

  /** One call carrying only `item`, answer normalised through the codec. Never rejects. // HOT */
  private async callOne(item: BatchItem): Promise<void> {
    const transport: BatchTransport | null = this.pick();
    if (transport === null) {
      this.firstCallDone(item);
      this.noNode([item]);
      return;
    }
    item.attempts++;
    this.ctx.stats.upstreamCalls++;
    const bodies = [item.body];
    let status: number;
    let answer: Buffer;
    try {
      ({ status, body: answer } = await transport.send(this.ctx.codec.encode(bodies), 1));
    } catch (err) {
      this.firstCallDone(item);
      this.transportError([item], err);
      return;
    }
    this.firstCallDone(item);
    if (status >= 200 && status < 300) {
      const part = this.ctx.codec.split(answer, bodies)?.[0];
      if (part === undefined) {
        const f = splitFailure(this.ctx.options.route);
        this.fail([item], f.status, f.body, f.retryable);
        return;
      }
      this.settle(item, status, part);
      return;
    }
    this.answerOne(item, status, answer);
  }
}

function bodyOf(item: BatchItem): object {
  return item.body;
}
