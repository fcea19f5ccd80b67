/**
 * Passive outlier ejection: counts the failures real traffic sees on each node and decides when a
 * node is ejected, for how long, and whether the pool's ejection cap allows it. It changes only the
 * passive fields of `NodeHealth`; availability, logging and timers belong to `PoolHealth`.
 */
import type { ResolvedOutlier } from './health-options.js';
import type { NodeHealth } from './node-health.js';

/**
 * The ejection count after `ejectionDecayMs` periods of health: one past ejection is forgotten per
 * full period since the last ejection ended (`lastEndMs`, -1 when none ended).
 */
export function decayedEjectionCount(
  count: number,
  lastEndMs: number,
  nowMs: number,
  decayMs: number,
): number {
  if (count === 0 || lastEndMs < 0) return count;
  const periods = Math.floor((nowMs - lastEndMs) / decayMs);
  return periods > 0 ? Math.max(0, count - periods) : count;
}

/** How long the `count`-th ejection (1-based) lasts: `count × baseEjectionMs`, at most `maxEjectionMs`. */
export function ejectionDurationMs(count: number, options: ResolvedOutlier): number {
  return Math.min(options.baseEjectionMs * count, options.maxEjectionMs);
}

/** One pool's passive detector. */
export class OutlierDetector {
  /** Replaced on reload; thresholds apply from the next attempt. */
  options: ResolvedOutlier;
  /** Nodes of the pool ejected now. */
  ejectedCount = 0;

  constructor(options: ResolvedOutlier) {
    this.options = options;
  }

  /** Counts a successful attempt: the failure streak ends. */
  onSuccess(h: NodeHealth): void {
    // HOT
    h.consecutiveFailures = 0;
    h.skipReported = false;
  }

  /**
   * Counts a failed attempt. Returns true when the node has reached the failure threshold and is not
   * ejected, i.e. the caller should eject it now if the pool allows (`refusal`). Failures seen while
   * the node is ejected (attempts sent before the ejection) are not counted.
   */
  onFailure(h: NodeHealth, reason: string): boolean {
    // HOT
    const threshold = this.options.consecutiveFailures;
    if (threshold === 0 || h.ejected) return false;
    h.lastFailure = reason;
    return ++h.consecutiveFailures >= threshold;
  }

  /**
   * Why one more node of a pool of `poolSize` nodes, `availableCount` of them available now (the
   * candidate included), may not be ejected; null when it may. The cap is a share of the pool's
   * size: with 4 nodes and 50 %, at most 2 are ejected at once; and a pool never ejects its last
   * available node.
   */
  refusal(poolSize: number, availableCount: number): string | null {
    if (availableCount <= 1) return 'it is the last available node of the pool';
    if ((this.ejectedCount + 1) * 100 > this.options.maxEjectionPercent * poolSize) {
      return `${this.ejectedCount} of ${poolSize} nodes are ejected and the cap is ${this.options.maxEjectionPercent}%`;
    }
    return null;
  }

  /** Ejects `h` at `nowMs` (the caller checked `refusal`). Returns the ejection time, ms. */
  eject(h: NodeHealth, nowMs: number): number {
    h.ejectionCount =
      decayedEjectionCount(h.ejectionCount, h.lastEjectionEndMs, nowMs, this.options.ejectionDecayMs) + 1;
    const durationMs = ejectionDurationMs(h.ejectionCount, this.options);
    h.ejected = true;
    h.ejectedUntilMs = nowMs + durationMs;
    h.consecutiveFailures = 0;
    h.skipReported = false;
    this.ejectedCount++;
    return durationMs;
  }

  /** Ends `h`'s ejection at `nowMs` (its time is up, or ejection was switched off). */
  release(h: NodeHealth, nowMs: number): void {
    if (!h.ejected) return;
    h.ejected = false;
    h.lastEjectionEndMs = nowMs;
    this.ejectedCount--;
  }

  /** Forgets `h` (the node left the pool): its ejection no longer counts against the cap. */
  forget(h: NodeHealth): void {
    if (h.ejected) this.ejectedCount--;
    h.ejected = false;
  }
}
