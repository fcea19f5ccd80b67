/**
 * Shadow traffic: a copy of a request sent to a route's mirror pool, whose answer is measured
 * (status, time to first byte, duration) and discarded. It never affects the client's response and
 * holds the plan until it ends, so its node is not closed under it by a reload.
 */
import type { RouteStats } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import type { Pool } from '../pool/pool.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { NO_NODES, type PickRequest } from '../balance/balance-policy.js';
import { nowMs } from './clock.js';
import { withHeaders } from './headers.js';

/** What the mirror copies from the original request (headers and body are passed as sent). */
export interface MirrorSource {
  readonly method: string;
  readonly url: string;
  readonly affinityKey: string | null;
  readonly cost: number;
  readonly promptTokens: number;
}

export class MirrorRequest {
  private readonly plan: Plan;
  private readonly node: UpstreamNode;
  private readonly stats: RouteStats;
  private readonly startMs: number;
  private readonly cost: number;
  private status = 0;
  private done = false;

  private constructor(plan: Plan, node: UpstreamNode, stats: RouteStats, cost: number) {
    this.plan = plan;
    this.node = node;
    this.stats = stats;
    this.cost = cost;
    this.startMs = nowMs();
  }

  /**
   * Sends a copy of `src` with `headers` and `body` (what the first attempt sends, before its pool's
   * `request_headers`) to a node of `pool`, with `pool`'s own `request_headers` in place of the
   * client's; does nothing when the pool has no eligible node.
   */
  static send(
    plan: Plan,
    pool: Pool,
    src: MirrorSource,
    headers: string[],
    body: Buffer | null,
    stats: RouteStats,
    ttfbMs: number,
    idleMs: number,
  ): void {
    const pick: PickRequest = {
      affinityKey: src.affinityKey,
      cost: src.cost,
      promptTokens: src.promptTokens,
      affinityOutcome: 'none',
      expectedTtftMs: -1,
      cachedTokens: -1,
      queuedMs: -1,
      stallMs: -1,
    };
    const node = pool.pick(pick, NO_NODES);
    if (node === null) {
      stats.count(503);
      return;
    }
    const cost = pool.policy.weighsCost ? src.cost : 0;
    // Another worker thread may have taken the node's last slot since the pick.
    if (!node.tryAddLoad(cost)) {
      stats.count(503);
      return;
    }
    const m = new MirrorRequest(plan, node, stats, cost);
    plan.acquire();
    node.attempts++;
    const extra = pool.requestHeaders;
    node.dispatch(
      {
        method: src.method,
        path: src.url,
        headers: extra === null ? headers : withHeaders(headers, extra),
        body,
        ttfbMs,
        idleMs,
      },
      m,
    );
  }

  onConnect(): void {}

  onHeaders(status: number): boolean {
    this.status = status;
    this.stats.ttfb.recordMs(nowMs() - this.startMs);
    return true;
  }

  onData(): boolean {
    return true;
  }

  onComplete(): void {
    this.end(this.status);
  }

  onError(): void {
    this.node.failures++;
    this.end(this.status === 0 ? 502 : this.status);
  }

  private end(status: number): void {
    if (this.done) return;
    this.done = true;
    this.node.removeLoad(this.cost);
    this.stats.count(status);
    this.stats.duration.recordMs(nowMs() - this.startMs);
    this.plan.release();
  }
}
