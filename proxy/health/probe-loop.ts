/**
 * A self-rescheduling timer for one periodic probe (a health check or a metrics scrape): the next
 * run is scheduled when the previous one has finished, so runs never overlap, and every timer is
 * unref'd so a probe loop never keeps the process alive. It knows nothing about what it runs.
 */

/** Loops started and not stopped, in this process. */
let runningLoops = 0;

/** How many probe loops are running in this process (a leak shows up here; tests use it). */
export function runningProbeLoops(): number {
  return runningLoops;
}

/** Runs `task` again and again, `nextDelayMs()` after each run ends, until stopped. */
export class ProbeLoop {
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private readonly task: () => Promise<void>;
  private readonly nextDelayMs: () => number;

  /**
   * @param task one run; it must settle (a rejection is treated like a resolution: the loop goes on).
   * @param nextDelayMs the wait after a run, ms; read after each run, so it sees reconfigured options.
   */
  constructor(task: () => Promise<void>, nextDelayMs: () => number) {
    this.task = task;
    this.nextDelayMs = nextDelayMs;
  }

  /** True between `start` and `stop`; a run that finishes after `stop` must not publish its result. */
  get active(): boolean {
    return this.running;
  }

  /** Starts the loop with the first run after `firstDelayMs`. No-op when already started. */
  start(firstDelayMs: number): void {
    if (this.running) return;
    this.running = true;
    runningLoops++;
    this.schedule(firstDelayMs);
  }

  /** Stops the loop: no run starts after this; a run in flight finishes without rescheduling. */
  stop(): void {
    if (this.running) runningLoops--;
    this.running = false;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private schedule(delayMs: number): void {
    if (!this.running) return;
    this.timer = setTimeout(this.fire, Math.max(0, delayMs));
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    const next = (): void => this.schedule(this.nextDelayMs());
    // Tasks report their own failures; a rejection here must still not end the loop.
    this.task().then(next, next);
  };
}
