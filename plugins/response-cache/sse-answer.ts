/**
 * Converts between the two forms of a completion answer for response-cache: a streamed answer (SSE
 * chunks, OpenAI format) is folded into the complete JSON answer that is stored, and a stored answer
 * is replayed as SSE for a client that asks for a stream. Only text answers: one with tool calls or
 * an error event is not folded (and so not stored).
 */
import type { CacheableKind } from './cache-key.js';

type Json = Record<string, unknown>;

interface Choice {
  index: number;
  role: string;
  text: string;
  finish: unknown;
}

/** A stream folded into the complete answer it amounts to. */
export interface FoldedAnswer {
  /** The answer, JSON text. */
  body: string;
  /** False when the stream had no usage event (the client did not ask for one): nor has the answer. */
  usage: boolean;
}

/** The complete answer a stream amounts to, or null when it cannot be folded. */
export function answerFromStream(sse: string, kind: CacheableKind): FoldedAnswer | null {
  let first: Json | null = null;
  let usage: unknown = null;
  let done = false;
  const choices = new Map<number, Choice>();
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    let ev: Json;
    try {
      ev = JSON.parse(data) as Json;
    } catch {
      return null;
    }
    if (ev['error'] !== undefined) return null;
    first ??= ev;
    if (ev['usage'] !== undefined && ev['usage'] !== null) usage = ev['usage'];
    const list = ev['choices'];
    if (!Array.isArray(list)) continue;
    for (const c of list as Json[]) {
      const index = typeof c['index'] === 'number' ? c['index'] : 0;
      let ch = choices.get(index);
      if (ch === undefined) choices.set(index, (ch = { index, role: 'assistant', text: '', finish: null }));
      if (kind === 'chat') {
        const delta = (c['delta'] ?? {}) as Json;
        if (delta['tool_calls'] !== undefined || delta['function_call'] !== undefined) return null;
        if (typeof delta['role'] === 'string') ch.role = delta['role'];
        if (typeof delta['content'] === 'string') ch.text += delta['content'];
      } else if (typeof c['text'] === 'string') {
        ch.text += c['text'];
      }
      if (c['finish_reason'] !== undefined && c['finish_reason'] !== null) ch.finish = c['finish_reason'];
    }
  }
  if (!done || first === null) return null;
  const out = [...choices.values()]
    .sort((a, b) => a.index - b.index)
    .map((c) =>
      kind === 'chat'
        ? { index: c.index, message: { role: c.role, content: c.text }, finish_reason: c.finish }
        : { index: c.index, text: c.text, finish_reason: c.finish },
    );
  const answer: Json = {
    id: first['id'],
    object: kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: first['created'],
    model: first['model'],
    choices: out,
  };
  if (usage !== null) answer['usage'] = usage;
  return { body: JSON.stringify(answer), usage: usage !== null };
}

/** A stored answer as SSE events ending in `[DONE]`; usage is sent when the client asked for it. */
export function streamFromAnswer(body: string, kind: CacheableKind, includeUsage: boolean): string {
  const a = JSON.parse(body) as Json;
  const base = {
    id: a['id'],
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: a['created'],
    model: a['model'],
  };
  const events: string[] = [];
  const push = (ev: Json): void => {
    events.push(`data: ${JSON.stringify(ev)}\n\n`);
  };
  const choices = Array.isArray(a['choices']) ? (a['choices'] as Json[]) : [];
  for (const c of choices) {
    const index = c['index'] ?? 0;
    if (kind === 'chat') {
      const m = (c['message'] ?? {}) as Json;
      push({
        ...base,
        choices: [
          {
            index,
            delta: { role: m['role'] ?? 'assistant', content: m['content'] ?? '' },
            finish_reason: null,
          },
        ],
      });
      push({ ...base, choices: [{ index, delta: {}, finish_reason: c['finish_reason'] ?? 'stop' }] });
    } else {
      push({
        ...base,
        choices: [{ index, text: c['text'] ?? '', finish_reason: c['finish_reason'] ?? 'stop' }],
      });
    }
  }
  if (includeUsage && a['usage'] !== undefined) push({ ...base, choices: [], usage: a['usage'] });
  events.push('data: [DONE]\n\n');
  return events.join('');
}
