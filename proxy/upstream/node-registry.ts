/**
 * Keeps UpstreamNode objects across config versions, so a reload that keeps a pool's node keeps its
 * warm keep-alive connections and its health state. Nodes are per pool: the same URL in two pools
 * is two nodes, each with its own pool's limits and health. A node is closed when the last plan
 * that references it is retired.
 */
import { SharedTable } from '../runtime/shared-table.js';
import { UpstreamNode, type NodeConnectionOptions } from './upstream-node.js';

/** The counters of a pool's node objects that were closed (see `NodeRegistry.retired`). */
export interface RetiredCounts {
  attempts: number;
  failures: number;
}

/** A pool's node over all its objects (`NodeRegistry.totals`). */
export interface NodeTotals {
  attempts: number;
  failures: number;
  inFlight: number;
}

/** The key of `retired`: a pool's node by URL. */
export function retiredKey(pool: string, url: string): string {
  return `${pool}|${url}`;
}

export class NodeRegistry {
  private readonly nodes = new Map<string, UpstreamNode>();
  /** Where the nodes' in-flight counts live: shared with the other worker threads when there are several. */
  private readonly shared: SharedTable;
  /**
   * What closed node objects had counted, by pool and URL: a reload that changes a pool's
   * connection settings replaces its node objects, and the metrics keep counting on from the old
   * ones' totals.
   */
  readonly retired = new Map<string, RetiredCounts>();
  /** Nodes an operator drained, by `drainKey`. */
  private readonly drains = new Set<string>();

  constructor(shared: SharedTable = new SharedTable({ slots: 1024 })) {
    this.shared = shared;
  }

  /**
   * Returns pool `pool`'s node for `url` (an origin, as the config loader normalises node URLs) with
   * these options, creating it if needed; adds one reference.
   */
  acquire(pool: string, url: string, options: NodeConnectionOptions): UpstreamNode {
    const key = `${pool}|${url}|${options.connections}|${options.connectTimeoutMs}|${options.client ?? 'sluice'}`;
    let node = this.nodes.get(key);
    if (node === undefined) {
      node = new UpstreamNode(url, options, this.shared.record('node', key));
      node.poolName = pool;
      this.nodes.set(key, node);
    }
    // Changed connection settings make a new object for a node the pool already has (and a reload
    // back to earlier settings may reuse an old one): every object follows the operator's drain.
    node.setDrained(this.drains.has(drainKey(pool, node.id)));
    node.refs++;
    return node;
  }

  /**
   * Drains or undrains a pool's node (the admin API): every live object of it, and those a reload
   * makes for it later, while the pool keeps the node.
   */
  setDrained(node: UpstreamNode, drained: boolean): void {
    const key = drainKey(node.poolName, node.id);
    if (drained) this.drains.add(key);
    else this.drains.delete(key);
    for (const n of this.nodes.values()) {
      if (n.poolName === node.poolName && n.id === node.id) n.setDrained(drained);
    }
    node.setDrained(drained);
  }

  /** Drops one reference; closes the node's connections when nothing references it. */
  release(node: UpstreamNode): void {
    if (--node.refs > 0) return;
    let others = false;
    for (const [key, n] of this.nodes) {
      if (n === node) this.nodes.delete(key);
      else if (n.poolName === node.poolName && n.id === node.id) others = true;
    }
    // A node the pool no longer has loses its drain: added again later, it starts undrained.
    if (!others) this.drains.delete(drainKey(node.poolName, node.id));
    const key = retiredKey(node.poolName, node.id);
    const r = this.retired.get(key);
    if (r === undefined) this.retired.set(key, { attempts: node.attempts, failures: node.failures });
    else {
      r.attempts += node.attempts;
      r.failures += node.failures;
    }
    void node.close().catch(() => undefined);
  }

  /**
   * A pool's node counted over every object it has had: the live ones (a reload that changed the
   * pool's connection settings keeps the old object until its requests end) and the closed ones.
   */
  totals(node: UpstreamNode): NodeTotals {
    const gone = this.retired.get(retiredKey(node.poolName, node.id));
    const t: NodeTotals = { attempts: gone?.attempts ?? 0, failures: gone?.failures ?? 0, inFlight: 0 };
    for (const n of this.nodes.values()) {
      if (n.poolName !== node.poolName || n.id !== node.id) continue;
      t.attempts += n.attempts;
      t.failures += n.failures;
      t.inFlight += n.inFlight;
    }
    return t;
  }

  /** Every live node (for metrics). */
  all(): IterableIterator<UpstreamNode> {
    return this.nodes.values();
  }

  /** Destroys all connections (final shutdown). */
  async destroyAll(): Promise<void> {
    const all = [...this.nodes.values()];
    this.nodes.clear();
    await Promise.allSettled(all.map((n) => n.destroy()));
  }
}

/** The key of a drained node: a pool's node by its id (origin). */
function drainKey(pool: string, id: string): string {
  return `${pool}|${id}`;
}
