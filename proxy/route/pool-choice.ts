/**
 * Which pool of a route's weighted split serves a request: a pin header naming a pool wins, then a
 * sticky session's remembered pool, then the weights (a stable hash of the sticky key when there
 * is one, so the choice is the same on every instance; otherwise random).
 */
import type { Pool } from '../pool/pool.js';
import { stableHash32 } from '../balance/stable-hash.js';
import { poolTag, type StickyTable } from './sticky-table.js';

/** What the choice reads from the request. */
export interface ChoiceSource {
  header(name: string): string | undefined;
}

export class PoolChoice {
  private readonly pools: readonly Pool[];
  /** Each pool's tag in the sticky table (`poolTag` of its name), same order as `pools`. */
  private readonly tags: Int32Array;
  /** Cumulative weights, same order as `pools`. */
  private readonly cumulative: Float64Array;
  private readonly total: number;
  private readonly pinHeader: string | null;
  private readonly stickyHeader: string | null;
  private readonly sticky: StickyTable | null;

  constructor(
    entries: readonly { pool: Pool; weight: number }[],
    pinHeader: string | null,
    stickyHeader: string | null,
    sticky: StickyTable | null,
  ) {
    this.pools = entries.map((e) => e.pool);
    this.tags = Int32Array.from(entries, (e) => poolTag(e.pool.name));
    this.cumulative = new Float64Array(entries.length);
    let sum = 0;
    entries.forEach((e, i) => {
      sum += e.weight;
      this.cumulative[i] = sum;
    });
    this.total = sum;
    this.pinHeader = pinHeader;
    this.stickyHeader = stickyHeader;
    this.sticky = sticky;
  }

  /** The pool for this request. */
  choose(src: ChoiceSource): Pool {
    // HOT
    if (this.pinHeader !== null) {
      const pinned = src.header(this.pinHeader);
      if (pinned !== undefined) {
        for (const p of this.pools) if (p.name === pinned) return p;
      }
    }
    // The session's hash places it by weight and names it in the sticky table, which never holds
    // the id itself (its length is the client's choice; see sticky-table.ts).
    let hash = 0;
    let keyed = false;
    if (this.stickyHeader !== null) {
      const key = src.header(this.stickyHeader);
      if (key !== undefined) {
        keyed = true;
        hash = stableHash32(key);
        if (this.sticky !== null) {
          const tag = this.sticky.get(hash | 0);
          if (tag !== 0) {
            const tags = this.tags;
            for (let i = 0; i < tags.length; i++) if (tags[i] === tag) return this.pools[i]!;
          }
        }
      }
    }
    const x = keyed ? (hash / 0x1_0000_0000) * this.total : Math.random() * this.total;
    let at = this.pools.length - 1;
    for (let i = 0; i < this.pools.length; i++) {
      if (x < this.cumulative[i]!) {
        at = i;
        break;
      }
    }
    if (keyed && this.sticky !== null) this.sticky.set(hash | 0, this.tags[at]!);
    return this.pools[at]!;
  }
}
