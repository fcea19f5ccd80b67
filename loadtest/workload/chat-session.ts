/**
 * Multi-turn chat sessions and the per-tenant pool they live in. A session keeps its system prompt
 * and history; each turn appends the user message and the reply that actually came back, so the next
 * turn's prompt starts with the previous one (what makes prefix caches and session affinity matter).
 * A session has at most one turn in flight, as a human user would.
 */

import type { SeededRandom } from '../sim/prng.js';
import type { ChatMessage, SessionTurn } from './planned-request.js';

/** One conversation. */
export class ChatSession {
  /** Conversation so far, without the system prompt. */
  readonly history: ChatMessage[] = [];
  /** Characters in `history`, for the context-length guard. */
  historyChars = 0;
  /** True while a turn is in flight. */
  busy = false;

  /**
   * @param id - sent as `x-session-id`
   * @param system - the shared system prompt, or null
   * @param turnsLeft - turns still to send
   */
  constructor(
    readonly id: string,
    readonly system: string | null,
    public turnsLeft: number,
  ) {}

  /** The messages of the next turn: system prompt, history, then `user`. */
  messagesWith(user: string): ChatMessage[] {
    const out: ChatMessage[] = this.system === null ? [] : [{ role: 'system', content: this.system }];
    out.push(...this.history, { role: 'user', content: user });
    return out;
  }

  /** Marks a turn as sent; the returned handle appends user + reply when it finishes. */
  startTurn(user: string): SessionTurn {
    this.busy = true;
    return {
      finish: (reply) => {
        this.busy = false;
        this.turnsLeft--;
        if (reply !== null) {
          this.history.push({ role: 'user', content: user }, { role: 'assistant', content: reply });
          this.historyChars += user.length + reply.length;
        }
      },
    };
  }
}

/**
 * A fixed number of session slots for one tenant. `take` picks a slot (uniformly, or by Zipf
 * popularity so that a few conversations are hot) and scans forward for a session that is not
 * waiting for a reply; finished sessions are replaced by new ones. When every slot is busy, a
 * one-off session is made that is not kept (counted as an overflow).
 */
export class SessionPool {
  private readonly slots: (ChatSession | null)[];
  /** Cumulative Zipf weights of the slots (last = 1), or null for uniform picks. */
  private readonly cumulative: Float64Array | null;
  /** One-off sessions made because every slot was busy. */
  overflows = 0;

  /**
   * @param create - makes a new session (id, system prompt, turn count)
   * @param zipf - popularity exponent: slot k is picked with weight 1 / (k + 1)^zipf; 0 = uniform
   */
  constructor(
    size: number,
    private readonly create: () => ChatSession,
    zipf = 0,
  ) {
    this.slots = new Array<ChatSession | null>(size).fill(null);
    if (zipf > 0) {
      const c = new Float64Array(size);
      let sum = 0;
      for (let k = 0; k < size; k++) c[k] = sum += 1 / Math.pow(k + 1, zipf);
      for (let k = 0; k < size; k++) c[k] = c[k]! / sum;
      this.cumulative = c;
    } else this.cumulative = null;
  }

  private startSlot(rng: SeededRandom): number {
    const c = this.cumulative;
    if (c === null) return rng.nextInt(this.slots.length);
    const r = rng.nextFloat();
    let lo = 0;
    let hi = c.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (c[mid]! <= r) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** A session ready for its next turn. `fits` rejects sessions whose history grew too long. */
  take(rng: SeededRandom, fits: (s: ChatSession) => boolean): ChatSession {
    const n = this.slots.length;
    const start = this.startSlot(rng);
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      let s = this.slots[i] ?? null;
      if (s !== null && s.busy) continue;
      if (s === null || s.turnsLeft <= 0 || !fits(s)) {
        s = this.create();
        this.slots[i] = s;
      }
      return s;
    }
    this.overflows++;
    return this.create();
  }
}
