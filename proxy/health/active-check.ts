/**
 * Active health checks of one node: a GET of the check path every interval (with jitter), counting
 * consecutive outcomes against the pool's thresholds and reporting each up/down transition. It never
 * writes the node's fields itself; `PoolHealth` turns a transition into availability.
 */
import type { ResolvedActiveCheck } from './health-options.js';
import type { ProbeClient } from './probe-client.js';
import { ProbeLoop } from './probe-loop.js';

/** What the checks say about a node. */
export const CheckState = {
  /** No probe has answered yet; the node counts as up. */
  unknown: 'unknown',
  up: 'up',
  /** `unhealthyThreshold` probes in a row failed; the node is out until `healthyThreshold` pass. */
  down: 'down',
} as const;
export type CheckState = (typeof CheckState)[keyof typeof CheckState];

/** Called on a transition: `down` true when the node went down, false when it came back up. */
export type CheckTransition = (down: boolean, reason: string) => void;

/**
 * Probes one node. A probe passes on any 2xx answer within `timeoutMs`; anything else (another
 * status, reset, refused, timeout) fails it.
 */
export class ActiveChecker {
  /** Current verdict. */
  state: CheckState = CheckState.unknown;
  /** Failed probes in a row. */
  consecutiveFailures = 0;
  /** Passed probes in a row. */
  consecutiveSuccesses = 0;
  /** Probes completed since start. */
  probes = 0;
  /** Probes failed since start. */
  failedProbes = 0;
  /** Why the last failed probe failed; null before any failure. */
  lastError: string | null = null;
  private options: ResolvedActiveCheck;
  private readonly origin: string;
  private readonly client: ProbeClient;
  private readonly onTransition: CheckTransition;
  private readonly loop: ProbeLoop;

  constructor(
    origin: string,
    options: ResolvedActiveCheck,
    client: ProbeClient,
    onTransition: CheckTransition,
  ) {
    this.origin = origin;
    this.options = options;
    this.client = client;
    this.onTransition = onTransition;
    this.loop = new ProbeLoop(
      () => this.probe(),
      () => this.options.intervalMs + Math.random() * this.options.jitterMs,
    );
  }

  /** Starts probing; the first probe runs within `jitterMs`, so a pool's nodes are not probed in lockstep. */
  start(): void {
    this.loop.start(Math.random() * this.options.jitterMs);
  }

  /** Applies new options (from a reload) from the next probe on; counts and state are kept. */
  reconfigure(options: ResolvedActiveCheck): void {
    this.options = options;
  }

  /** Stops probing; a probe in flight is ignored when it ends. */
  stop(): void {
    this.loop.stop();
  }

  private async probe(): Promise<void> {
    const { path, timeoutMs } = this.options;
    const r = await this.client.get(this.origin, path, timeoutMs, 0);
    if (!this.loop.active) return;
    if (r.error === null && r.status >= 200 && r.status < 300) this.observe(true, `HTTP ${r.status}`);
    else this.observe(false, r.error ?? `HTTP ${r.status}`);
  }

  private observe(ok: boolean, reason: string): void {
    this.probes++;
    if (ok) {
      this.consecutiveFailures = 0;
      this.consecutiveSuccesses++;
      if (this.state !== CheckState.down) {
        this.state = CheckState.up;
      } else if (this.consecutiveSuccesses >= this.options.healthyThreshold) {
        this.state = CheckState.up;
        this.onTransition(
          false,
          `${this.consecutiveSuccesses} probes of ${this.options.path} passed in a row`,
        );
      }
      return;
    }
    this.failedProbes++;
    this.lastError = reason;
    this.consecutiveSuccesses = 0;
    this.consecutiveFailures++;
    if (this.state !== CheckState.down && this.consecutiveFailures >= this.options.unhealthyThreshold) {
      this.state = CheckState.down;
      this.onTransition(
        true,
        `${this.consecutiveFailures} probes of ${this.options.path} failed in a row, last: ${reason}`,
      );
    }
  }
}
