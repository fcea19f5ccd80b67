/**
 * Per-node request outcome counters (what the HTTP layer did with each inference request), kept
 * apart from the engine's token and cache counters. Rendering them is `metrics.ts`.
 */

/** How an inference request ended, besides its HTTP status. */
export const Outcome = {
  /** The node destroyed the connection on purpose (drop fault). */
  dropped: 'dropped',
  /** The client went away before the response completed. */
  aborted: 'aborted',
} as const;

/** Counts inference request outcomes by endpoint and status (or `Outcome`). */
export class NodeCounters {
  private readonly byKey = new Map<string, number>();
  /** Responses completed with 200. */
  served = 0;
  /** Errors injected by `error_rate` or `x-sim-status`. */
  injectedErrors = 0;
  /** Connections destroyed by `drop_rate` or `x-sim-drop-after`. */
  injectedDrops = 0;
  /** Requests whose client disconnected first. */
  clientAborts = 0;

  /** Records one finished request: `endpoint` as `chat`, `completion`, `embedding`; `outcome` a status or an `Outcome`. */
  record(endpoint: string, outcome: number | string): void {
    const key = `${endpoint} ${outcome}`;
    this.byKey.set(key, (this.byKey.get(key) ?? 0) + 1);
    if (outcome === 200) this.served++;
    else if (outcome === Outcome.dropped) this.injectedDrops++;
    else if (outcome === Outcome.aborted) this.clientAborts++;
  }

  /** Records an injected error reply (also counted by `record`). */
  recordInjectedError(): void {
    this.injectedErrors++;
  }

  /** Every (endpoint, outcome, count), sorted for stable output. */
  entries(): { endpoint: string; outcome: string; count: number }[] {
    return [...this.byKey.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, count]) => {
        const [endpoint = '', outcome = ''] = key.split(' ');
        return { endpoint, outcome, count };
      });
  }
}
