/**
 * Test helper: a clock that moves only when the test says so, for code that takes a `() => number`
 * clock (admission, health, rate limits, jobs). It never reads the real time.
 */

/** A manual clock in ms. `now` is bound, so it can be passed as a clock function on its own. */
export class ManualClock {
  /** The current time, ms; tests may also set it directly. */
  t: number;

  /** Starts at `startMs` (default 1000: positive, so "0 = never" sentinels stay distinct). */
  constructor(startMs = 1000) {
    this.t = startMs;
  }

  readonly now = (): number => this.t;

  /** Moves the clock forward by `ms`. */
  advance(ms: number): void {
    this.t += ms;
  }
}
