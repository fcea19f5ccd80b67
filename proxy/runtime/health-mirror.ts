/**
 * Node health across the threads of `server.workers`. The main thread alone judges it: it runs the
 * active checks, the metrics scrapes, slow start and outlier ejection, on the outcomes of every
 * thread's attempts. A worker thread sends its attempt outcomes to the main thread in batches
 * (`OutcomeRelay`: per node, runs of successes and each failure with its reason, in order) and
 * copies the main thread's verdicts into its own node objects (`readHealth`), which the main thread
 * publishes in the shared table (`publishHealth`). Both happen on short timers
 * (`HEALTH_MIRROR_MS`), so a worker follows an ejection or a return within a few tens of
 * milliseconds of the main thread.
 */
import type { Plan } from '../plan/plan.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { SharedTable } from './shared-table.js';

/** How often outcomes are sent and verdicts published and read, ms. */
export const HEALTH_MIRROR_MS = 20;

/** One node's outcomes since the last batch: a number is that many successes in a row, a string a failure. */
export interface OutcomeBatch {
  pool: string;
  id: string;
  events: (number | string)[];
}

/** A worker thread's side: collects outcomes per node until `take`. */
export class OutcomeRelay {
  private readonly pending = new Map<UpstreamNode, OutcomeBatch>();

  /** Records one attempt's outcome (`reason` null: a success). Bound: pass it as a function. */
  readonly record = (pool: string, node: UpstreamNode, reason: string | null): void => {
    // HOT
    let b = this.pending.get(node);
    if (b === undefined) {
      b = { pool, id: node.id, events: [] };
      this.pending.set(node, b);
    }
    const ev = b.events;
    const last = ev.length - 1;
    if (reason !== null) ev.push(reason);
    else if (last >= 0 && typeof ev[last] === 'number') ev[last] = ev[last] + 1;
    else ev.push(1);
  };

  /** The outcomes since the last call, or null when there were none. */
  take(): OutcomeBatch[] | null {
    if (this.pending.size === 0) return null;
    const out = [...this.pending.values()];
    this.pending.clear();
    return out;
  }
}

/** The main thread's side: feeds a worker's outcomes to the pools' health trackers. */
export function judgeOutcomes(plan: Plan, batches: readonly OutcomeBatch[]): void {
  for (const b of batches) {
    const pool = plan.pools.get(b.pool);
    const health = pool?.state.health ?? null;
    const node = pool?.members.find((m) => m.node.id === b.id)?.node;
    if (health === null || node === undefined) continue;
    for (const e of b.events) {
      if (typeof e === 'string') health.recordFailure(node, e);
      else for (let i = 0; i < e; i++) health.recordSuccess(node);
    }
  }
}

/** Flags of a published verdict. */
const PUBLISHED = 1;
const AVAILABLE = 2;
const SATURATED = 4;
/** Fixed-point scale of the fractions published (weight factor, KV-cache use). */
const SCALE = 1_000_000;

function recordKey(pool: string, id: string): string {
  return `${pool}|${id}`;
}

/** The main thread's side: writes every node's verdict into the shared table. */
export function publishHealth(plan: Plan, table: SharedTable): void {
  for (const pool of plan.pools.values()) {
    for (const m of pool.members) {
      const n = m.node;
      const r = table.record('health', recordKey(pool.name, n.id));
      const c = r.cells;
      const at = r.cell;
      Atomics.store(c, at + 1, Math.round(n.weightFactor * SCALE));
      Atomics.store(c, at + 2, n.scrapedRunning);
      Atomics.store(c, at + 3, n.scrapedWaiting);
      const kv = table.record('health-kv', recordKey(pool.name, n.id));
      Atomics.store(kv.cells, kv.cell, n.scrapedKvUsage < 0 ? -1 : Math.round(n.scrapedKvUsage * SCALE));
      Atomics.store(c, at, PUBLISHED | (n.available ? AVAILABLE : 0) | (n.saturated ? SATURATED : 0));
    }
  }
}

/**
 * A worker thread's side: copies the published verdicts into its nodes, and tells a pool's
 * admission when the nodes that serve changed.
 */
export function readHealth(plan: Plan, table: SharedTable): void {
  for (const pool of plan.pools.values()) {
    let changed = false;
    for (const m of pool.members) {
      const n = m.node;
      const r = table.record('health', recordKey(pool.name, n.id));
      const c = r.cells;
      const at = r.cell;
      const flags = Atomics.load(c, at);
      if ((flags & PUBLISHED) === 0) continue;
      const available = (flags & AVAILABLE) !== 0;
      if (available !== n.available) changed = true;
      n.available = available;
      n.saturated = (flags & SATURATED) !== 0;
      n.weightFactor = Atomics.load(c, at + 1) / SCALE;
      n.scrapedRunning = Atomics.load(c, at + 2);
      n.scrapedWaiting = Atomics.load(c, at + 3);
      const kv = table.record('health-kv', recordKey(pool.name, n.id));
      const k = Atomics.load(kv.cells, kv.cell);
      n.scrapedKvUsage = k < 0 ? -1 : k / SCALE;
    }
    if (changed) pool.state.servingChanged();
  }
}
