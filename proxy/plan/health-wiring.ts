/**
 * Maps a pool's `health` config onto the health module's options and keeps the pool's PoolHealth
 * (which lives in PoolState, across reloads) pointed at the pool's current nodes.
 */
import type { PoolConfig } from '../../config/types.js';
import type { HealthEvent, PoolHealthOptions } from '../health/health-options.js';
import { PoolHealth } from '../health/pool-health.js';
import type { PoolState } from '../pool/pool-state.js';
import type { Logger } from '../runtime/logger.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** The health options a pool config asks for. */
export function healthOptions(pc: PoolConfig, onEvent?: (e: HealthEvent) => void): PoolHealthOptions {
  const h = pc.health;
  const o = h.outlier;
  return {
    activeCheck:
      h.active === undefined
        ? undefined
        : {
            path: h.active.path,
            intervalMs: h.active.interval_ms,
            timeoutMs: h.active.timeout_ms,
            healthyThreshold: h.active.healthy_threshold,
            unhealthyThreshold: h.active.unhealthy_threshold,
          },
    outlier: {
      consecutiveFailures: o.consecutive_failures,
      baseEjectionMs: o.base_ejection_ms,
      maxEjectionMs: o.max_ejection_ms,
      maxEjectionPercent: o.max_ejection_percent,
    },
    slowStartMs: h.slow_start_ms,
    scrape:
      h.scrape === undefined
        ? undefined
        : {
            intervalMs: h.scrape.interval_ms,
            maxWaiting: h.scrape.max_waiting,
            maxKvUsage: h.scrape.max_kv_usage,
          },
    onEvent,
  };
}

/** Creates or updates the pool's health tracker for its current node list. */
export function attachHealth(
  state: PoolState,
  pc: PoolConfig,
  nodes: readonly UpstreamNode[],
  log: Logger,
  weightless: ReadonlySet<UpstreamNode> = new Set(),
  relay: HealthRelay | null = null,
): void {
  // A worker thread neither probes, scrapes, ejects nor ramps: the main thread does, for every
  // thread's traffic, and its verdicts are copied into this thread's nodes (runtime/health-mirror.ts).
  const options =
    relay === null
      ? healthOptions(pc, (e) => state.countHealthEvent(e.kind))
      : { outlier: { consecutiveFailures: 0 }, slowStartMs: 0 };
  state.health ??= new PoolHealth(pc.name, options, log);
  state.health.relay = relay === null ? null : (node, reason) => relay(pc.name, node, reason);
  state.health.update(nodes, options, weightless);
  state.servingChanged();
}

/** Where a worker thread's attempt outcomes go (`reason` null: a success). */
export type HealthRelay = (pool: string, node: UpstreamNode, reason: string | null) => void;
