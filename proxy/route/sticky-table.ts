/**
 * Version affinity: remembers which pool of a split each session started on, so a session stays on
 * its version while weights change. A bounded LRU (a Map in recency order); it outlives reloads.
 * Sessions it has forgotten fall back to a stable hash of the session key, which gives the same
 * pool as long as the weights are unchanged, on every Sluice instance.
 */

/** Sessions remembered per route. */
const CAPACITY = 100_000;

export class StickyTable {
  private readonly map = new Map<string, string>();

  /** The pool name the session started on, or undefined. Refreshes its recency. */
  get(key: string): string | undefined {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, pool: string): void {
    if (this.map.size >= CAPACITY) {
      const oldest = this.map.keys().next();
      if (oldest.done !== true) this.map.delete(oldest.value);
    }
    this.map.set(key, pool);
  }

  get size(): number {
    return this.map.size;
  }
}
