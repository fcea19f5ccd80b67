/**
 * The prompt text of a request body, walked in order and handed piece by piece to a sink, so that a
 * reader can hash or collect it without the whole text ever being built: chat `messages` as
 * `role: text` lines (content-part arrays contribute their text parts), else the completion
 * `prompt`, else an `input`, after a top-level system prompt. The prefix affinity key and
 * cache-aware's prompt blocks read the same text through it. Never throws on odd bodies.
 */

/** Receives the prompt text in order. */
export interface PromptSink {
  /** True once the sink wants no more text: the walk stops at the next piece boundary. */
  full(): boolean;
  /** The next piece of text (may be ''). */
  add(s: string): void;
  /** Called just before the last of a chat body's top-level `messages`, when it has two or more. */
  lastMessage(): void;
}

/** Walks `body`'s prompt text into `sink` (nothing for a body that is not a JSON object). */
export function walkPromptText(body: unknown, sink: PromptSink): void {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
  const b = body as Record<string, unknown>;
  // A top-level system prompt (`system`, or the Responses API's `instructions`) comes first.
  const system = typeof b['system'] === 'string' ? b['system'] : b['instructions'];
  if (typeof system === 'string' && system !== '') {
    sink.add('system: ');
    sink.add(system);
    sink.add('\n');
  }
  if (Array.isArray(b['messages'])) addMessages(sink, b['messages'] as unknown[], true);
  else if (b['prompt'] !== undefined) addPrompt(sink, b['prompt']);
  else if (b['input'] !== undefined) addPrompt(sink, b['input']);
}

/** Chat content: a string, or OpenAI content parts (text parts contribute their text). */
function addContent(sink: PromptSink, content: unknown): void {
  if (typeof content === 'string') {
    sink.add(content);
    return;
  }
  if (!Array.isArray(content)) return;
  for (const part of content as unknown[]) {
    if (sink.full()) return;
    if (typeof part === 'string') sink.add(part);
    else if (typeof part === 'object' && part !== null) {
      const p = part as Record<string, unknown>;
      if (typeof p['text'] === 'string') sink.add(p['text']);
      // A non-text part (image, audio) is marked by its type so that it still separates texts.
      else if (typeof p['type'] === 'string') sink.add(`[${p['type']}]`);
    }
  }
}

/**
 * Completion `prompt` (or `input`): a string, a list of strings (the first is used: each is its own
 * sequence upstream), token ids (written as decimal numbers), or a list of token-id lists (the
 * first), or chat-style messages (as in the Responses API `input`).
 */
function addPrompt(sink: PromptSink, prompt: unknown): void {
  if (typeof prompt === 'string') {
    sink.add(prompt);
    return;
  }
  if (!Array.isArray(prompt) || prompt.length === 0) return;
  const first: unknown = prompt[0];
  if (typeof first === 'string') {
    sink.add(first);
    return;
  }
  if (typeof first === 'number') {
    for (const t of prompt as unknown[]) {
      if (sink.full()) return;
      if (typeof t === 'number') sink.add(`${t} `);
    }
    return;
  }
  if (Array.isArray(first)) {
    addPrompt(sink, first);
    return;
  }
  if (typeof first === 'object' && first !== null) {
    addMessages(sink, prompt as unknown[], false);
  }
}

/** Chat messages in order, one `role: text` line each; `top`: the body's own `messages`. */
function addMessages(sink: PromptSink, items: readonly unknown[], top: boolean): void {
  const last = top && items.length >= 2 ? items.length - 1 : -1;
  for (let i = 0; i < items.length; i++) {
    if (i === last) sink.lastMessage();
    if (sink.full()) return;
    const m = items[i];
    if (typeof m !== 'object' || m === null) continue;
    const msg = m as Record<string, unknown>;
    sink.add(typeof msg['role'] === 'string' ? msg['role'] : '');
    sink.add(': ');
    addContent(sink, msg['content']);
    sink.add('\n');
  }
}
