/**
 * A route's micro-batcher, compiled with the plan: the batcher itself, a node picker over the
 * route's pool that reuses one transport per node, and the pool's idle signal (a node with nothing
 * in flight means no request should wait for a window).
 */
import type { BatchingConfig, TimeoutsConfig } from '../../config/types.js';
import { eligible, NO_NODES, type PickRequest } from '../balance/balance-policy.js';
import { jsonItemCodec } from '../batch/batch-codec.js';
import type { BatchNodePicker, BatchTransport } from '../batch/batch-transport.js';
import { openAiEmbeddingsCodec } from '../batch/embeddings-codec.js';
import { createMicroBatcher, type MicroBatcher } from '../batch/micro-batcher.js';
import { nowMs } from '../lifecycle/clock.js';
import type { Pool } from '../pool/pool.js';
import { NodeBatchTransport } from '../upstream/buffered-call.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/**
 * Picks the node of each batch call with the pool's own policy; when the pool has no eligible node,
 * the route's fallback pools in order, as a request's attempt does.
 */
class PoolBatchPicker implements BatchNodePicker {
  /** The pool, then the route's fallback pools. */
  private readonly pools: readonly Pool[];
  private readonly path: string;
  private readonly timeouts: TimeoutsConfig;
  /** One transport per pool and node (a node in two pools gets each pool's headers). */
  private readonly transports: Map<UpstreamNode, NodeBatchTransport>[];
  /** Reused pick request: batch calls carry no affinity key. */
  private readonly request: PickRequest = {
    affinityKey: null,
    cost: 128,
    promptTokens: 128,
    affinityOutcome: 'none',
    expectedTtftMs: -1,
    cachedTokens: -1,
    queuedMs: -1,
    stallMs: -1,
  };

  constructor(pools: readonly Pool[], path: string, timeouts: TimeoutsConfig) {
    this.pools = pools;
    this.path = path;
    this.timeouts = timeouts;
    this.transports = pools.map(() => new Map<UpstreamNode, NodeBatchTransport>());
  }

  pick(): BatchTransport | null {
    for (let i = 0; i < this.pools.length; i++) {
      const pool = this.pools[i]!;
      const node = pool.pick(this.request, NO_NODES);
      if (node === null) continue;
      if (i > 0) pool.state.fellBack++;
      const byNode = this.transports[i]!;
      let t = byNode.get(node);
      if (t === undefined) {
        const to = this.timeouts;
        t = new NodeBatchTransport(
          node,
          this.path,
          pool.state,
          to.ttfb_ms,
          to.idle_ms,
          to.total_ms,
          pool.requestHeaders,
        );
        byNode.set(node, t);
      }
      return t;
    }
    return null;
  }
}

/**
 * Builds the micro-batcher of a route's requests given `pool`: its calls go to `pool`, or to the
 * first of `fallback` with an eligible node, under the route's `timeouts`.
 */
export function createRouteBatcher(
  route: string,
  config: BatchingConfig,
  path: string,
  pool: Pool,
  fallback: readonly Pool[],
  timeouts: TimeoutsConfig,
): MicroBatcher {
  const chain = [pool, ...fallback];
  return createMicroBatcher({
    route,
    mode: config.mode,
    codec: config.mode === 'native' ? openAiEmbeddingsCodec : jsonItemCodec,
    upstream: new PoolBatchPicker(chain, path, timeouts),
    maxBatchSize: config.max_batch_size,
    maxWaitMs: config.max_wait_ms,
    targetLatencyMs: config.target_latency_ms,
    maxConcurrentPerNode: config.max_concurrent_per_node,
    maxAttempts: config.max_attempts,
    dedup: config.dedup,
    // Batch retries spend the pool's retry budget and count as its retries, like a request's.
    retryAllowed: () => {
      const state = pool.state;
      if (!state.retryBudget.tryWithdraw(nowMs())) return false;
      state.retries++;
      return true;
    },
    // HOT: asked per item; a free node means nothing should wait for a window. The pool's calls
    // go to the first pool of the chain with an eligible node, so that pool's nodes decide.
    idle: () => {
      for (let p = 0; p < chain.length; p++) {
        const members = chain[p]!.members;
        let any = false;
        for (let i = 0; i < members.length; i++) {
          const n = members[i]!.node;
          if (!eligible(n)) continue;
          if (n.inFlight === 0) return true;
          any = true;
        }
        if (any) return false;
      }
      return false;
    },
  });
}
