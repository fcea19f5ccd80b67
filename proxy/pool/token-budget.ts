/**
 * A budget for optional extra work (retries, hedges) as a share of real traffic, after Finagle's
 * RetryBudget: every request deposits `percent / 100` of a token, every extra attempt withdraws one,
 * and a small reserve refilling at `minPerSecond` keeps a trickle allowed at low traffic. Extra
 * attempts therefore stay at most `percent % × requests + minPerSecond × seconds`, so retries never
 * multiply an outage.
 */

/** Most tokens the traffic share can bank, so a quiet period cannot fund a later storm. */
const MAX_BANKED = 100;

export class TokenBudget {
  /** Share of requests that may add an extra attempt, 0..n (0.2 = 20 %). */
  private readonly share: number;
  /** Reserve refill rate, tokens per ms. */
  private readonly reservePerMs: number;
  /** Reserve capacity: one second's worth. */
  private readonly reserveCap: number;
  private banked = 0;
  private reserve: number;
  /** Last reserve refill, monotonic ms. */
  private refilledMs = 0;
  /** Extra attempts granted since start (for metrics). */
  granted = 0;
  /** Extra attempts refused for lack of budget (for metrics). */
  refused = 0;

  constructor(percent: number, minPerSecond: number) {
    this.share = percent / 100;
    this.reservePerMs = minPerSecond / 1000;
    this.reserveCap = minPerSecond;
    this.reserve = minPerSecond;
  }

  /** Called once per request that could later want an extra attempt. */
  deposit(): void {
    // HOT
    const b = this.banked + this.share;
    this.banked = b > MAX_BANKED ? MAX_BANKED : b;
  }

  /** Takes one token if there is one; false means the extra attempt must not be made. */
  tryWithdraw(nowMs: number): boolean {
    if (this.banked >= 1) {
      this.banked -= 1;
      this.granted++;
      return true;
    }
    const r = this.reserve + (nowMs - this.refilledMs) * this.reservePerMs;
    this.refilledMs = nowMs;
    this.reserve = r > this.reserveCap ? this.reserveCap : r;
    if (this.reserve >= 1) {
      this.reserve -= 1;
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
