/**
 * One request as the workload planned it: what to send (path, headers, body) and what it belongs
 * to (tenant, kind, chat session), so that the sender can report back and the recorder can attribute
 * its latency. Plain data; no I/O.
 */

/** Request kinds as they appear in results. */
export const RequestKind = {
  /** A turn of a multi-turn chat session. */
  chat: 'chat',
  /** A single-turn chat request carrying the hot key. */
  hotKey: 'hot-key',
  /** One embeddings request. */
  embedding: 'embedding',
} as const;
export type RequestKind = (typeof RequestKind)[keyof typeof RequestKind];

/** A chat conversation message. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** A request ready to send. */
export interface PlannedRequest {
  kind: RequestKind;
  /** Index into the workload's tenants. */
  tenant: number;
  /** Request path, e.g. `/v1/chat/completions`. */
  path: string;
  /** Header names in lower case. */
  headers: Record<string, string>;
  /** JSON body text. */
  body: string;
  /** True when the answer is an SSE stream. */
  stream: boolean;
  /** Session this turn belongs to, or null; the session needs the reply to grow its history. */
  session: SessionTurn | null;
}

/** The session side of a chat turn: where to append the user message and the reply. */
export interface SessionTurn {
  /** Called once when the turn ended: the assistant text on success, null on failure. */
  finish(reply: string | null): void;
}
