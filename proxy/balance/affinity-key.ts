/**
 * Affinity key extraction: turns a route's `affinity` config into a function that reads one key
 * from a request (a header, a JSON body field, the tenant, or a hash of the prompt prefix). Never
 * throws: a request without a usable key gets null and is placed without affinity.
 */
import type { AffinityConfig } from '../../config/types.js';
import { stableHashHex } from './stable-hash.js';

/** What an extractor may read from a request. The Session implements it. */
export interface AffinitySource {
  /** Header value by lower-case name, undefined when absent. */
  header(name: string): string | undefined;
  /** The parsed JSON body, or null when there is none or it is not JSON. */
  json(): unknown;
  /** The tenant the request was authenticated as, or null. */
  readonly tenant: string | null;
}

/** Where a pool takes its affinity key from (`balance.affinity` in the config). */
export type { AffinityConfig };

/** Reads the affinity key of one request: a non-empty string, or null for none. */
export type AffinityExtractor = (src: AffinitySource) => string | null;

/** Default prompt-prefix length for `source: prefix`, characters. */
export const DEFAULT_PREFIX_CHARS = 512;

/**
 * Compiles `cfg` into an extractor (once per plan; the extractor runs once per request).
 *
 * - `header`: the header's value (name matched case-insensitively).
 * - `body_field`: the value at a dotted path of the JSON body (`metadata.session_id`); strings are
 *   used as they are, finite numbers and booleans as their text, anything else is no key.
 * - `tenant`: the tenant's name.
 * - `prefix`: 8 hex digits of a stable hash of the first `chars` characters of the prompt text:
 *   chat `messages` in order as `role: text` lines (content-part arrays contribute their text
 *   parts), else the completion `prompt`, else an `input`. Requests that share a KV-cache prefix
 *   share a key; requests that differ within the first `chars` characters almost never do.
 *
 * Empty values are no key. Extraction never throws.
 *
 * @example
 * const extract = createAffinityExtractor({ source: 'prefix', chars: 512 });
 * extract(session); // 'a3f09c1e', or null for a body without a prompt
 */
export function createAffinityExtractor(cfg: AffinityConfig): AffinityExtractor {
  switch (cfg.source) {
    case 'header': {
      const name = cfg.name.toLowerCase();
      return (src) => {
        try {
          return nonEmpty(src.header(name));
        } catch {
          return null;
        }
      };
    }
    case 'body_field': {
      const path = cfg.field.split('.');
      return (src) => {
        try {
          return scalarText(at(src.json(), path));
        } catch {
          return null;
        }
      };
    }
    case 'tenant':
      return (src) => {
        try {
          return nonEmpty(src.tenant);
        } catch {
          return null;
        }
      };
    case 'prefix': {
      const chars = Number.isInteger(cfg.chars) && cfg.chars > 0 ? cfg.chars : DEFAULT_PREFIX_CHARS;
      return (src) => {
        try {
          const text = promptPrefix(src.json(), chars);
          return text === '' ? null : stableHashHex(text);
        } catch {
          // A source that throws on an odd body (or a getter-laden object) means no key, not a 500.
          return null;
        }
      };
    }
    default:
      throw new Error(`unknown affinity source ${(cfg as { source: string }).source}`);
  }
}

function nonEmpty(v: string | null | undefined): string | null {
  return typeof v === 'string' && v !== '' ? v : null;
}

/** The value at `path` inside plain JSON objects, or undefined. Arrays are not indexed. */
function at(root: unknown, path: readonly string[]): unknown {
  let v = root;
  for (const part of path) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
    if (!Object.prototype.hasOwnProperty.call(v, part)) return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  return v;
}

function scalarText(v: unknown): string | null {
  if (typeof v === 'string') return v === '' ? null : v;
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : null;
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  return null;
}

/**
 * The first `chars` characters of the request's prompt text, or '' when it has none. Stops reading
 * as soon as it has enough, so a long conversation costs no more than its first messages.
 */
export function promptPrefix(body: unknown, chars: number): string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return '';
  const b = body as Record<string, unknown>;
  const acc = new PrefixBuilder(chars);
  // A top-level system prompt (`system`, or the Responses API's `instructions`) comes first.
  const system = typeof b['system'] === 'string' ? b['system'] : b['instructions'];
  if (typeof system === 'string' && system !== '') {
    acc.add('system: ');
    acc.add(system);
    acc.add('\n');
  }
  if (Array.isArray(b['messages'])) addMessages(acc, b['messages'] as unknown[]);
  else if (b['prompt'] !== undefined) addPrompt(acc, b['prompt']);
  else if (b['input'] !== undefined) addPrompt(acc, b['input']);
  return acc.text();
}

/** Collects text up to a character limit. */
class PrefixBuilder {
  private readonly parts: string[] = [];
  /** Characters collected so far. */
  private length = 0;
  constructor(private readonly limit: number) {}

  full(): boolean {
    return this.length >= this.limit;
  }

  add(s: string): void {
    if (this.length >= this.limit || s === '') return;
    const room = this.limit - this.length;
    const piece = s.length > room ? s.slice(0, room) : s;
    this.parts.push(piece);
    this.length += piece.length;
  }

  text(): string {
    return this.parts.join('');
  }
}

/** Chat content: a string, or OpenAI content parts (text parts contribute their text). */
function addContent(acc: PrefixBuilder, content: unknown): void {
  if (typeof content === 'string') {
    acc.add(content);
    return;
  }
  if (!Array.isArray(content)) return;
  for (const part of content as unknown[]) {
    if (acc.full()) return;
    if (typeof part === 'string') acc.add(part);
    else if (typeof part === 'object' && part !== null) {
      const p = part as Record<string, unknown>;
      if (typeof p['text'] === 'string') acc.add(p['text']);
      // A non-text part (image, audio) is marked by its type so that it still separates texts.
      else if (typeof p['type'] === 'string') acc.add(`[${p['type']}]`);
    }
  }
}

/**
 * Completion `prompt` (or `input`): a string, a list of strings (the first is used: each is its own
 * sequence upstream), token ids (written as decimal numbers), or a list of token-id lists (the
 * first), or chat-style messages (as in the Responses API `input`).
 */
function addPrompt(acc: PrefixBuilder, prompt: unknown): void {
  if (typeof prompt === 'string') {
    acc.add(prompt);
    return;
  }
  if (!Array.isArray(prompt) || prompt.length === 0) return;
  const first: unknown = prompt[0];
  if (typeof first === 'string') {
    acc.add(first);
    return;
  }
  if (typeof first === 'number') {
    for (const t of prompt as unknown[]) {
      if (acc.full()) return;
      if (typeof t === 'number') acc.add(`${t} `);
    }
    return;
  }
  if (Array.isArray(first)) {
    addPrompt(acc, first);
    return;
  }
  if (typeof first === 'object' && first !== null) {
    addMessages(acc, prompt as unknown[]);
  }
}

/** Chat messages in order, one `role: text` line each. */
function addMessages(acc: PrefixBuilder, items: readonly unknown[]): void {
  for (const m of items) {
    if (acc.full()) return;
    if (typeof m !== 'object' || m === null) continue;
    const msg = m as Record<string, unknown>;
    acc.add(typeof msg['role'] === 'string' ? msg['role'] : '');
    acc.add(': ');
    addContent(acc, msg['content']);
    acc.add('\n');
  }
}
