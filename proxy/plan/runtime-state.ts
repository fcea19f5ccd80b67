/**
 * State that outlives a plan, looked up by name when a plan is compiled: each pool's PoolState
 * (budgets, TTFB window, health) and each route's sticky-session table. A reload reconfigures
 * these in place; a pool or route that disappears has its state closed when the plan that still
 * used it is applied.
 */
import type { PoolConfig } from '../../config/types.js';
import { PoolState } from '../pool/pool-state.js';
import { StickyTable } from '../route/sticky-table.js';

export class RuntimeState {
  readonly pools = new Map<string, PoolState>();
  readonly sticky = new Map<string, StickyTable>();

  /** The state of pool `config.name`, created or reconfigured. */
  poolState(config: PoolConfig): PoolState {
    let s = this.pools.get(config.name);
    if (s === undefined) {
      s = new PoolState(config);
      this.pools.set(config.name, s);
    } else {
      s.configure(config);
    }
    return s;
  }

  /** The sticky table of a route, created on first use. */
  stickyTable(route: string): StickyTable {
    let t = this.sticky.get(route);
    if (t === undefined) {
      t = new StickyTable();
      this.sticky.set(route, t);
    }
    return t;
  }

  /** Forgets pools and routes the new config no longer has. */
  retain(pools: ReadonlySet<string>, routes: ReadonlySet<string>): void {
    for (const [name, s] of this.pools) {
      if (!pools.has(name)) {
        s.close();
        this.pools.delete(name);
      }
    }
    for (const name of this.sticky.keys()) if (!routes.has(name)) this.sticky.delete(name);
  }

  /** Stops every timer (shutdown). */
  close(): void {
    for (const s of this.pools.values()) s.close();
  }
}
