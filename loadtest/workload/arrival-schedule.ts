/**
 * The open loop's clock: when each tenant's next request is due, from fixed rates, evenly spaced or
 * with exponential (Poisson) gaps, merged across tenants in a binary min-heap. Times are intended
 * send times in milliseconds from the start of the phase; the sender measures latency from them.
 *
 *   heap[0] = earliest due        children of i: 2i+1, 2i+2
 */

import type { SeededRandom } from '../sim/prng.js';

/** One due arrival. */
export interface Arrival {
  /** Intended send time, ms from the phase start. */
  atMs: number;
  /** Index of the arrival stream (the tenant). */
  stream: number;
}

/** Merges per-stream arrival processes. */
export class ArrivalSchedule {
  private readonly heap: Arrival[] = [];
  private readonly gapMs: number[];

  /**
   * @param rates - arrivals per second of each stream (0 = silent)
   * @param poisson - exponential gaps instead of even spacing
   * @param rng - draws phases and gaps
   */
  constructor(
    rates: readonly number[],
    private readonly poisson: boolean,
    private readonly rng: SeededRandom,
  ) {
    this.gapMs = rates.map((r) => (r > 0 ? 1000 / r : Infinity));
    this.gapMs.forEach((gap, stream) => {
      if (!Number.isFinite(gap)) return;
      // A random phase keeps evenly spaced tenants from all arriving in the same millisecond.
      this.push({ atMs: this.poisson ? this.draw(gap) : this.rng.nextFloat() * gap, stream });
    });
  }

  /** The earliest due arrival without removing it, or undefined when every stream is silent. */
  peek(): Arrival | undefined {
    return this.heap[0];
  }

  /** Removes the earliest arrival and schedules that stream's next one. */
  shift(): Arrival | undefined {
    const top = this.heap[0];
    if (top === undefined) return undefined;
    const gap = this.gapMs[top.stream] as number;
    const next: Arrival = { atMs: top.atMs + (this.poisson ? this.draw(gap) : gap), stream: top.stream };
    this.heap[0] = next;
    this.down(0);
    return top;
  }

  private draw(meanGapMs: number): number {
    return -Math.log(1 - this.rng.nextFloat()) * meanGapMs;
  }

  private push(a: Arrival): void {
    this.heap.push(a);
    let i = this.heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if ((this.heap[parent] as Arrival).atMs <= a.atMs) break;
      this.heap[i] = this.heap[parent] as Arrival;
      i = parent;
    }
    this.heap[i] = a;
  }

  private down(i: number): void {
    const n = this.heap.length;
    const item = this.heap[i] as Arrival;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      const right = child + 1;
      if (right < n && (this.heap[right] as Arrival).atMs < (this.heap[child] as Arrival).atMs) child = right;
      if ((this.heap[child] as Arrival).atMs >= item.atMs) break;
      this.heap[i] = this.heap[child] as Arrival;
      i = child;
    }
    this.heap[i] = item;
  }
}
