/**
 * Version affinity: remembers which pool of a split each session started on, so a session stays on
 * its version while weights change. A bounded LRU (a Map in recency order); it outlives reloads.
 * Sessions it has forgotten fall back to a stable hash of the session key, which gives the same
 * pool as long as the weights are unchanged, on every Sluice instance.
 *
 * A session is remembered by that 32-bit hash, never by its id: the id is whatever the client put
 * in the header (up to the header size limit), so a table of ids would hold as many bytes as
 * clients chose to send. Each entry is a small integer and a pool name shared with the plan, a few
 * dozen bytes, so the table's memory is bounded by CAPACITY alone. Two sessions whose ids share a
 * hash share an entry, and so a pool; they are sent to the same pool by the weights anyway (the
 * weights read the same hash), so this only matters after a weight change, and stays a canary
 * choice either way.
 */

/**
 * Sessions remembered per route. An entry is about 40 bytes; with the room a Map keeps for deleted
 * entries until it rebuilds its store, a full table under churn holds about 7 MB.
 */
const CAPACITY = 100_000;

export class StickyTable {
  /** Session hash (`stableHash32` of the id, as a signed 32-bit integer) → pool name. */
  private readonly map = new Map<number, string>();

  /** The pool name the session of hash `hash` started on, or undefined. Refreshes its recency. */
  get(hash: number): string | undefined {
    const v = this.map.get(hash);
    if (v !== undefined) {
      this.map.delete(hash);
      this.map.set(hash, v);
    }
    return v;
  }

  /** Remembers that the session of hash `hash` is on `pool`, forgetting the oldest when full. */
  set(hash: number, pool: string): void {
    if (this.map.size >= CAPACITY) {
      const oldest = this.map.keys().next();
      if (oldest.done !== true) this.map.delete(oldest.value);
    }
    this.map.set(hash, pool);
  }

  get size(): number {
    return this.map.size;
  }
}
