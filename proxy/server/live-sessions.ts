/**
 * The sessions in flight on a server, in an intrusive list (the links are fields of the session:
 * nothing is allocated per request), so that a drain that reaches its deadline can end each of them
 * properly instead of cutting connections under them.
 */
import type { Session } from '../lifecycle/session.js';

export class LiveSessions {
  private head: Session | null = null;

  add(s: Session): void {
    // HOT
    const h = this.head;
    s.livePrev = null;
    s.liveNext = h;
    if (h !== null) h.livePrev = s;
    this.head = s;
  }

  remove(s: Session): void {
    // HOT
    const prev = s.livePrev;
    const next = s.liveNext;
    if (prev !== null) prev.liveNext = next;
    else if (this.head === s) this.head = next;
    if (next !== null) next.livePrev = prev;
    s.livePrev = null;
    s.liveNext = null;
  }

  /** The sessions now in the list (a copy: ending one removes it). */
  snapshot(): Session[] {
    const out: Session[] = [];
    for (let s = this.head; s !== null; s = s.liveNext) out.push(s);
    return out;
  }
}
