/**
 * The settings of one route's micro-batcher, their defaults and their validation. Invalid settings
 * throw at construction (startup or reload), never on the request path.
 */

import type { BatchCodec } from './batch-codec.js';
import type { BatchNodePicker, BatchTransport } from './batch-transport.js';

/** How a micro-batch reaches the nodes. */
export const BatchMode = {
  /** One upstream call carries every item (e.g. embeddings with an input array). */
  native: 'native',
  /** The micro-batch goes to one node as concurrent single-item calls. */
  fanout: 'fanout',
} as const;
export type BatchMode = (typeof BatchMode)[keyof typeof BatchMode];

/** Options of `createMicroBatcher`. Only `mode`, `codec` and `upstream` are required. */
export interface MicroBatchOptions {
  /** Route name, used in error messages. Default `'batch'`. */
  route?: string;
  mode: BatchMode;
  /** Builds combined bodies and splits answers (native), groups and keys items. */
  codec: BatchCodec;
  /** One node, or a picker asked per upstream call (native) or per micro-batch (fanout). */
  upstream: BatchTransport | BatchNodePicker;
  /** The window closes at this many distinct items. Default 32. */
  maxBatchSize?: number; // items
  /** The window closes this long after its first item. Default 5. */
  maxWaitMs?: number; // ms
  /** Batch sizes the node runs best (compiled graphs); the size limit snaps down to one. Default none. */
  preferredSizes?: readonly number[]; // items
  /** Latency objective for a batch; the window and size shrink to keep it. Default 0 = off. */
  targetLatencyMs?: number; // ms
  /**
   * True when the pool has idle capacity: an item is then dispatched at once instead of waiting.
   * Default: reads the batcher's `poolIdle` field, which the caller may update.
   */
  idle?: () => boolean;
  /** Identical items (same codec key) in one window are computed once. Default true. */
  dedup?: boolean;
  /** Upstream calls per item, including the first (retryable failures only). Default 3. */
  maxAttempts?: number;
  /** Backoff before retry n is `min(retryMaxMs, retryBaseMs × 2^(n−1))`. Default 10. */
  retryBaseMs?: number; // ms
  /** Backoff ceiling. Default 1000. */
  retryMaxMs?: number; // ms
  /** Fanout: concurrent single-item calls per node. Default 8. */
  maxConcurrentPerNode?: number; // calls
  /** Items accepted and not yet resolved; beyond it `submit` answers 503 at once. Default 10000. */
  maxQueuedItems?: number; // items
  /**
   * Asked once per item before it is retried (the pool's retry budget); false resolves the item
   * with its last failure now. Default: always true.
   */
  retryAllowed?: () => boolean;
}

/** `MicroBatchOptions` with every default applied and checked. */
export interface ResolvedBatchOptions {
  route: string;
  mode: BatchMode;
  maxBatchSize: number; // items
  maxWaitMs: number; // ms
  preferredSizes: readonly number[]; // items, ascending, each ≤ maxBatchSize
  targetLatencyMs: number; // ms
  dedup: boolean;
  maxAttempts: number;
  retryBaseMs: number; // ms
  retryMaxMs: number; // ms
  maxConcurrentPerNode: number; // calls
  maxQueuedItems: number; // items
  retryAllowed: () => boolean;
}

const ALWAYS = (): boolean => true;

function positiveInt(name: string, v: number | undefined, dflt: number): number {
  const n = v ?? dflt;
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be a positive integer, got ${n}`);
  return n;
}

function nonNegative(name: string, v: number | undefined, dflt: number): number {
  const n = v ?? dflt;
  if (!Number.isFinite(n) || n < 0) throw new RangeError(`${name} must be a number ≥ 0, got ${n}`);
  return n;
}

/** Applies the defaults and validates; throws `RangeError` naming the first bad option. */
export function resolveBatchOptions(o: MicroBatchOptions): ResolvedBatchOptions {
  if (o.mode !== BatchMode.native && o.mode !== BatchMode.fanout) {
    throw new RangeError(`mode must be "native" or "fanout", got ${String(o.mode)}`);
  }
  const maxBatchSize = positiveInt('maxBatchSize', o.maxBatchSize, 32);
  const preferred = [...(o.preferredSizes ?? [])].sort((a, b) => a - b);
  for (const s of preferred) {
    if (!Number.isInteger(s) || s < 1 || s > maxBatchSize) {
      throw new RangeError(`preferredSizes entries must be integers in 1..maxBatchSize, got ${s}`);
    }
  }
  const retryBaseMs = nonNegative('retryBaseMs', o.retryBaseMs, 10);
  const retryMaxMs = nonNegative('retryMaxMs', o.retryMaxMs, 1000);
  if (retryMaxMs < retryBaseMs) throw new RangeError('retryMaxMs must be ≥ retryBaseMs');
  return {
    route: o.route ?? 'batch',
    mode: o.mode,
    maxBatchSize,
    maxWaitMs: nonNegative('maxWaitMs', o.maxWaitMs, 5),
    preferredSizes: preferred,
    targetLatencyMs: nonNegative('targetLatencyMs', o.targetLatencyMs, 0),
    dedup: o.dedup ?? true,
    maxAttempts: positiveInt('maxAttempts', o.maxAttempts, 3),
    retryBaseMs,
    retryMaxMs,
    maxConcurrentPerNode: positiveInt('maxConcurrentPerNode', o.maxConcurrentPerNode, 8),
    maxQueuedItems: positiveInt('maxQueuedItems', o.maxQueuedItems, 10_000),
    retryAllowed: o.retryAllowed ?? ALWAYS,
  };
}
