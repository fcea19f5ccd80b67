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
 * A fixed number of session slots for one tenant. `take` picks a random slot and scans forward for a
 * session that is not waiting for a reply; finished sessions are replaced by new ones. When every slot
 * is busy, a one-off session is made that is not kept (counted as an overflow).
 */
export class SessionPool {
  private readonly slots: (ChatSession | null)[];
  /** One-off sessions made because every slot was busy. */
  overflows = 0;

  /** @param create - makes a new session (id, system prompt, turn count) */
  constructor(
    size: number,
    private readonly create: () => ChatSession,
  ) {
    this.slots = new Array<ChatSession | null>(size).fill(null);
  }

  /** A session ready for its next turn. `fits` rejects sessions whose history grew too long. */
  take(rng: SeededRandom, fits: (s: ChatSession) => boolean): ChatSession {
    const n = this.slots.length;
    const start = rng.nextInt(n);
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
