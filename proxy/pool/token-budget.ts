/**
 * A budget for optional extra work (retries, hedges) as a share of real traffic, after Finagle's
 * RetryBudget: every request deposits `percent / 100` of a token when it starts, every extra attempt
 * withdraws one, and the balance also refills at `minPerSecond`, which keeps a trickle allowed at
 * low traffic. The balance is held to `max(minPerSecond, 1)` plus the deposits of the requests still
 * running: what finished requests deposited and did not use lapses, so healthy traffic cannot fund
 * a storm of retries when an outage starts. Over any period, extra attempts therefore stay at most
 * `percent % × the requests running in it + minPerSecond × its seconds + max(minPerSecond, 1)`, so
 * retries never multiply an outage.
 */

export class TokenBudget {
  /** Share of requests that may add an extra attempt, 0..n (0.2 = 20 %). */
  private readonly share: number;
  /** Refill rate, tokens per ms. */
  private readonly refillPerMs: number;
  /**
   * Tokens held whatever the traffic: one second's refill, and at least one (without a minimum,
   * a share below 100 % still adds up to a whole token over several requests).
   */
  private readonly floor: number;
  /** Tokens available (may be above the cap until the next deposit or withdrawal applies it). */
  private banked: number;
  /** Requests that deposited and have not been released. */
  private running = 0;
  /** Last refill, monotonic ms. */
  private refilledMs = 0;
  /** Extra attempts granted since start (for metrics). */
  granted = 0;
  /** Extra attempts refused for lack of budget (for metrics). */
  refused = 0;

  constructor(percent: number, minPerSecond: number) {
    this.share = percent / 100;
    this.refillPerMs = minPerSecond / 1000;
    this.floor = minPerSecond > 1 ? minPerSecond : 1;
    this.banked = minPerSecond;
  }

  /** Most tokens the balance holds now: the floor plus the share of the requests running. */
  private cap(): number {
    return this.floor + this.share * this.running;
  }

  /** Called once per request that could later want an extra attempt, when it starts. */
  deposit(): void {
    // HOT
    this.running++;
    const b = this.banked + this.share;
    const cap = this.cap();
    this.banked = b > cap ? cap : b;
  }

  /** Called once per request that deposited, when it ended: its unused share lapses. */
  release(): void {
    // HOT
    if (this.running > 0) this.running--;
  }

  /** Takes one token if there is one; false means the extra attempt must not be made. */
  tryWithdraw(nowMs: number): boolean {
    const b = this.banked + (nowMs - this.refilledMs) * this.refillPerMs;
    this.refilledMs = nowMs;
    const cap = this.cap();
    this.banked = b > cap ? cap : b;
    if (this.banked >= 1) {
      this.banked -= 1;
      this.granted++;
      return true;
    }
    this.refused++;
    return false;
  }

  /** Gives back a token `tryWithdraw` granted for an extra attempt that was not made after all. */
  refund(): void {
    this.banked += 1;
    this.granted--;
  }
}
