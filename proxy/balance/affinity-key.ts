/**
 * Affinity key extraction: turns a route's `affinity` config into a function that reads one key
 * from a request (a header, a JSON body field, the tenant, or a hash of the prompt prefix). Never
 * throws: a request without a usable key gets null and is placed without affinity.
 */
import type { AffinityConfig } from '../../config/types.js';
import { walkPromptText, type PromptSink } from './prompt-text.js';
import { hex8, StableHashStream } from './stable-hash.js';

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
      // One sink per extractor, reset per request: the prefix is hashed as it is walked, never
      // built.
      const sink = new PrefixHashSink(chars);
      return (src) => {
        try {
          sink.reset();
          walkPromptText(src.json(), sink);
          return sink.key();
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
 * Hashes the first `limit` characters of the text it is fed (the prompt text, `prompt-text.ts`),
 * without building it: the key is `stableHashHex` of that text.
 */
class PrefixHashSink implements PromptSink {
  private readonly hash = new StableHashStream();
  /** Characters hashed so far. */
  private length = 0;
  constructor(private readonly limit: number) {}

  reset(): void {
    this.hash.reset();
    this.length = 0;
  }

  full(): boolean {
    return this.length >= this.limit;
  }

  add(s: string): void {
    if (this.length >= this.limit || s === '') return;
    const n = Math.min(s.length, this.limit - this.length);
    this.hash.add(s, n);
    this.length += n;
  }

  lastMessage(): void {}

  /** 8 hex digits of the hash, or null when no text was fed. */
  key(): string | null {
    return this.length === 0 ? null : hex8(this.hash.hash32());
  }
}
