/**
 * One dispatched micro-batch's first round: counts the items whose first upstream call has not
 * returned yet and reports the batch latency (window open to last first-call answer) to the latency
 * controller. Retries are not part of it, so a flaky node does not look like a slow one.
 */

import { nowMs } from '../lifecycle/clock.js';
import type { LatencyController } from './latency-controller.js';

/** Created by the micro-batcher when a window closes; the dispatchers call `callDone`. */
export class BatchRun {
  /** Items whose first call is still out. */
  private pending: number;

  constructor(
    /** When the window opened (monotonic ms). */
    private readonly openedAtMs: number,
    items: number,
    private readonly controller: LatencyController,
  ) {
    this.pending = items;
  }

  /** A first call carrying `items` items has returned (any outcome). // HOT */
  callDone(items: number): void {
    this.pending -= items;
    if (this.pending === 0) this.controller.observe(nowMs() - this.openedAtMs);
  }
}
