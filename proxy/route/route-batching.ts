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

/** Picks the node of each batch call with the pool's own policy. */
class PoolBatchPicker implements BatchNodePicker {
  private readonly pool: Pool;
  private readonly path: string;
  private readonly timeouts: TimeoutsConfig;
  private readonly transports = new Map<UpstreamNode, NodeBatchTransport>();
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

  constructor(pool: Pool, path: string, timeouts: TimeoutsConfig) {
    this.pool = pool;
    this.path = path;
    this.timeouts = timeouts;
  }

  pick(): BatchTransport | null {
    const node = this.pool.pick(this.request, NO_NODES);
    if (node === null) return null;
    let t = this.transports.get(node);
    if (t === undefined) {
      const to = this.timeouts;
      const pool = this.pool;
      t = new NodeBatchTransport(
        node,
        this.path,
        pool.state,
        to.ttfb_ms,
        to.idle_ms,
        to.total_ms,
        pool.requestHeaders,
      );
      this.transports.set(node, t);
    }
    return t;
  }
}

/** Builds the micro-batcher of a route that sends to `pool`. */
export function createRouteBatcher(
  route: string,
  config: BatchingConfig,
  path: string,
  pool: Pool,
  timeouts: TimeoutsConfig,
): MicroBatcher {
  const members = pool.members;
  return createMicroBatcher({
    route,
    mode: config.mode,
    codec: config.mode === 'native' ? openAiEmbeddingsCodec : jsonItemCodec,
    upstream: new PoolBatchPicker(pool, path, timeouts),
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
    // HOT: asked per item; a free node means nothing should wait for a window.
    idle: () => {
      for (let i = 0; i < members.length; i++) {
        const n = members[i]!.node;
        if (n.inFlight === 0 && eligible(n)) return true;
      }
      return false;
    },
  });
}
