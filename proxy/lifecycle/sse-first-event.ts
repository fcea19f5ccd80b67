/**
 * Finds where the first event of a server-sent-events body starts, across chunk boundaries, so
 * that time to first token can be taken on the bytes Sluice forwards. Inference servers send the
 * head of a stream before the prefill runs and the first `data:` event after it; SSE comment lines
 * (`: ping`) and blank lines before it are keep-alives, not output. It reads bytes only until the
 * first event line starts and never copies or decodes them.
 */

/** The scan found an event line: the first token arrived. */
export const SSE_EVENT_FOUND = -1;
/** Scan state: at the start of a line (the state a new body starts in). */
export const SSE_LINE_START = 0;
/** Scan state: inside a comment line (`:` at line start), which is not an event. */
const SSE_IN_COMMENT = 1;

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;

/**
 * Scans `chunk` from `state` (SSE_LINE_START for the first chunk, else what the previous call
 * returned). Returns SSE_EVENT_FOUND when a line that is neither blank nor a comment starts in this
 * chunk (`data:`, `event:`, `id:`, ...), else the state to resume from with the next chunk.
 */
export function scanSseForEvent(chunk: Uint8Array, state: number): number {
  // HOT
  let s = state;
  for (let i = 0; i < chunk.length; i++) {
    const b = chunk[i]!;
    if (s === SSE_LINE_START) {
      if (b === LF || b === CR) continue;
      if (b !== COLON) return SSE_EVENT_FOUND;
      s = SSE_IN_COMMENT;
    } else if (b === LF || b === CR) {
      s = SSE_LINE_START;
    }
  }
  return s;
}
