/**
 * The clock of an engine: runs steps back to back on timers with absolute deadlines, so timer lateness
 * does not accumulate, and goes idle when a step has nothing to do. What a step contains and costs
 * is the `Stepper`'s business.
 */

import { nowMs } from '../../proxy/lifecycle/clock.js';

/** A late timer within this many ms is caught up (the next step starts when the last should have ended). */
const MAX_CATCH_UP_MS = 3;
/** Most steps completed back to back in one timer callback while catching up. */
const MAX_STEPS_PER_TICK = 64;

/** What the loop drives. */
export interface Stepper {
  /** Plans a step starting at `start` (monotonic ms); returns when it ends, or -1 when there is nothing to do. */
  beginStep(start: number): number;
  /** Completes the step that just ended (emits its tokens). */
  endStep(): void;
  /** Called on `kick` while a step is in progress: work that need not wait for the step boundary. */
  betweenSteps(now: number): void;
}

/**
 * Step timing. A step's end is a deadline; when its timer fires late, the next step still starts at
 * that deadline (up to `MAX_CATCH_UP_MS` behind), so a model step of 0.5 ms really yields ~2,000
 * steps/s although Node timers have 1 ms granularity. A longer stall (GC, a loaded machine) is not
 * caught up: the next step starts now.
 */
export class StepLoop {
  private active = false;
  private endsAt = 0; // monotonic ms
  private timer: NodeJS.Timeout | null = null;
  private kickPending = false;

  constructor(private readonly stepper: Stepper) {}

  /**
   * Asks for scheduling at the end of this event-loop turn (so requests arriving together share a
   * step): an idle loop starts a step, a busy one calls `betweenSteps`.
   */
  kick(): void {
    if (this.kickPending) return;
    this.kickPending = true;
    setImmediate(this.onKick);
  }

  /** Stops at once; the current step never ends. `kick` starts again. */
  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.active = false;
  }

  private readonly onKick = (): void => {
    this.kickPending = false;
    const now = nowMs();
    if (this.active) {
      this.stepper.betweenSteps(now);
      return;
    }
    this.endsAt = this.stepper.beginStep(now);
    if (this.endsAt >= 0) this.arm(now);
  };

  private arm(now: number): void {
    this.active = true;
    this.timer = setTimeout(this.onTimer, Math.max(0, this.endsAt - now));
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    for (let i = 0; i < MAX_STEPS_PER_TICK; i++) {
      this.stepper.endStep();
      const now = nowMs();
      const start = now - this.endsAt > MAX_CATCH_UP_MS ? now : this.endsAt;
      this.endsAt = this.stepper.beginStep(start);
      if (this.endsAt < 0) {
        this.active = false;
        return;
      }
      if (this.endsAt > now) break;
    }
    this.arm(nowMs());
  };
}
