/**
 * Whether an SSE answer already ended as a complete OpenAI stream: its last event is `data: [DONE]`
 * (dispatched by its blank line), followed at most by comments and blank lines. Read from the end
 * of what was forwarded (usage-tail.ts keeps it), only when the node's answer then fails: a node
 * that keeps the body open after `[DONE]` has answered all the same.
 */
import { TAIL_BYTES, type BodyTail } from './usage-tail.js';

const DONE_AT_END = /(?:^|\n)data: ?\[DONE\]\r?\n\r?\n(?:\r?\n|:[^\r\n]*\r?\n)*$/;

/** True when the bytes kept in `earlier` followed by `newest` end with a dispatched `[DONE]`. */
export function endsWithDone(earlier: BodyTail | null, newest: Buffer | null): boolean {
  if (newest === null) return false;
  let text = newest.toString('latin1', Math.max(0, newest.length - TAIL_BYTES));
  if (text.length < TAIL_BYTES && earlier !== null) {
    const [older, old] = earlier.parts();
    text = older.toString('latin1') + old.toString('latin1') + text;
  }
  return DONE_AT_END.test(text);
}
