/**
 * model-alias: public model names mapped to the names the pool serves. Rewrites the request body's
 * `model` on the way in and `model` in the answer on the way out (line by line in a stream; a JSON
 * body is held until its end to be rewritten whole), and answers `GET /v1/models` with the public
 * names. Patterns may end in `*`; the matched rest replaces `*` in the target.
 */
import { StringDecoder } from 'node:string_decoder';
import { definePlugin, type PluginRequest } from '../api.js';

/** One alias as configured. */
interface AliasConfig {
  public: string;
  target: string;
}

interface Options {
  aliases: AliasConfig[];
  /** Answer GET /v1/models with the public names. */
  list_models: boolean;
  /** Refuse models no alias matches (404 model_not_found) instead of passing them through. */
  strict: boolean;
  /** `owned_by` in the model list. */
  owned_by: string;
}

/** The names of one request, kept from onRequest to the answer. */
interface Renamed {
  public: string;
  target: string;
  /** Matches `"model": "<target>"` in the answer. */
  pattern: RegExp;
  /** Streams: the bytes after the last newline, carried to the next chunk. */
  carry: string;
  /** Non-stream bodies: the chunks held until the end. */
  held: Buffer[];
  /** Streams: decodes across chunk boundaries (a character may straddle two chunks). */
  decoder: StringDecoder | null;
}

class Alias {
  readonly prefix: string;
  readonly wildcard: boolean;
  readonly target: string;
  readonly public: string;
  constructor(c: AliasConfig) {
    this.public = c.public;
    this.wildcard = c.public.endsWith('*');
    this.prefix = this.wildcard ? c.public.slice(0, -1) : c.public;
    this.target = c.target;
  }

  /** The target for `model`, or null when this alias does not match it. */
  resolve(model: string): string | null {
    if (!this.wildcard) return model === this.public ? this.target : null;
    if (!model.startsWith(this.prefix)) return null;
    return this.target.replace('*', model.slice(this.prefix.length));
  }
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function rewrite(text: string, r: Renamed): string {
  return text.replace(r.pattern, `"model":${JSON.stringify(r.public)}`);
}

export default definePlugin<Options>({
  name: 'model-alias',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    required: ['aliases'],
    properties: {
      aliases: {
        description: 'Public name (exact, or a prefix ending in *) to the model name the pool serves.',
        type: 'array',
        minItems: 1,
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['public', 'target'],
          properties: {
            public: { type: 'string', minLength: 1, pattern: '^[^*]*\\*?$' },
            target: { type: 'string', minLength: 1 },
          },
        },
      },
      list_models: { type: 'boolean', default: true },
      strict: { type: 'boolean', default: false },
      owned_by: { type: 'string', default: 'sluice' },
    },
  },
  create(options) {
    const aliases = options.aliases.map((a) => new Alias(a));
    const listed = JSON.stringify({
      object: 'list',
      data: aliases
        .filter((a) => !a.wildcard)
        .map((a) => ({ id: a.public, object: 'model', created: 0, owned_by: options.owned_by })),
    });
    return {
      onRequest(req: PluginRequest) {
        if (options.list_models && req.method === 'GET' && req.path === '/v1/models') {
          req.respond(200, listed);
          return;
        }
        const body = req.json();
        if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
        const model = (body as { model?: unknown }).model;
        if (typeof model !== 'string') return;
        for (const a of aliases) {
          const target = a.resolve(model);
          if (target === null) continue;
          if (target !== model) {
            req.setBody({ ...body, model: target });
            // Later plugins see the target in the body; the answer will name the public model
            // (response-cache keys on it, so one target's public names keep their own answers).
            req.tag('public_model', model);
          }
          const state: Renamed = {
            public: model,
            target,
            pattern: new RegExp(`"model"\\s*:\\s*${escapeRegExp(JSON.stringify(target))}`, 'g'),
            carry: '',
            held: [],
            decoder: null,
          };
          req.state = state;
          return;
        }
        if (options.strict) {
          req.reject(404, `The model '${model}' does not exist`, 'model_not_found', 'model');
        }
      },
      onResponseChunk(req, chunk) {
        const r = req.state as Renamed | undefined;
        if (r === undefined || r.public === r.target) return;
        if (!req.streaming) {
          // A JSON answer is rewritten whole: the field may straddle chunks.
          if (chunk !== null) {
            r.held.push(chunk);
            return '';
          }
          return rewrite(Buffer.concat(r.held).toString('utf8'), r);
        }
        const d = (r.decoder ??= new StringDecoder('utf8'));
        if (chunk === null) {
          const rest = r.carry + d.end();
          return rest === '' ? undefined : rewrite(rest, r);
        }
        const text = r.carry + d.write(chunk);
        const cut = text.lastIndexOf('\n') + 1;
        r.carry = text.slice(cut);
        return rewrite(text.slice(0, cut), r);
      },
    };
  },
});
