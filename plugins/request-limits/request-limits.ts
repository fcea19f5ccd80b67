/**
 * request-limits: per-route caps on what a request may ask for — `max_tokens`, the number of
 * messages, the number of embedding inputs, and any top-level body field (a maximum, a length, a
 * set of allowed values, or forbidden altogether). A request over a cap gets a 400 whose `param`
 * names the field; `max_tokens` may be lowered to the cap instead (`clamp_max_tokens`).
 */
import { definePlugin, type PluginRequest } from '../api.js';

interface FieldRule {
  field: string;
  /** Numbers: the largest value allowed. */
  max?: number;
  /** Numbers: the smallest value allowed. */
  min?: number;
  /** Strings and lists: the longest allowed. */
  max_length?: number;
  /** Only these values are allowed. */
  allowed?: (string | number | boolean)[];
  /** The field must not be present. */
  forbidden?: boolean;
}

interface Options {
  max_tokens?: number;
  clamp_max_tokens: boolean;
  max_messages?: number;
  max_inputs?: number;
  fields: FieldRule[];
}

type Body = Record<string, unknown>;

function lengthOf(v: unknown): number {
  if (typeof v === 'string') return v.length;
  if (Array.isArray(v)) return v.length;
  return -1;
}

/**
 * A value as a number for `max`/`min`: a number, or a string that is one (inference servers such as
 * vLLM accept `"1.9"` for a float field, so the cap must see it too); else NaN.
 */
function numberOf(v: unknown): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && v.trim() !== '') return Number(v);
  return NaN;
}

/**
 * What `allowed` compares: a scalar as it is; an object by its `type` (`response_format: {type:
 * text}`, `tool_choice: {type: function}`), so `allowed: [text]` reads as the kinds allowed.
 */
function allowedValue(v: unknown): unknown {
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) return (v as Body)['type'];
  return v;
}

/** The message for the first rule `body` breaks, with the field name, or null. */
function fieldProblem(body: Body, r: FieldRule): string | null {
  if (!(r.field in body)) return null;
  const v = body[r.field];
  if (r.forbidden === true) return `${r.field} is not allowed on this route`;
  if (r.allowed !== undefined && !r.allowed.includes(allowedValue(v) as string)) {
    return `${r.field} must be one of ${r.allowed.map((a) => JSON.stringify(a)).join(', ')}`;
  }
  const x = numberOf(v);
  if (r.max !== undefined || r.min !== undefined) {
    if (typeof v !== 'number' && Number.isNaN(x) && typeof v === 'string')
      return `${r.field} must be a number (got ${JSON.stringify(v).slice(0, 40)})`;
    if (r.max !== undefined && x > r.max) return `${r.field} must be at most ${r.max} (got ${v as number})`;
    if (r.min !== undefined && x < r.min) return `${r.field} must be at least ${r.min} (got ${v as number})`;
  }
  const n = lengthOf(v);
  if (r.max_length !== undefined && n > r.max_length) {
    return `${r.field} must be at most ${r.max_length} long (got ${n})`;
  }
  return null;
}

export default definePlugin<Options>({
  name: 'request-limits',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: {
      max_tokens: {
        type: 'integer',
        minimum: 1,
        description: 'Cap on max_tokens and max_completion_tokens.',
      },
      clamp_max_tokens: {
        type: 'boolean',
        default: false,
        description: 'Lower max_tokens to the cap instead of refusing.',
      },
      max_messages: { type: 'integer', minimum: 1, description: 'Most chat messages.' },
      max_inputs: { type: 'integer', minimum: 1, description: 'Most embedding inputs (input as a list).' },
      fields: {
        type: 'array',
        default: [],
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['field'],
          properties: {
            field: { type: 'string', minLength: 1 },
            max: { type: 'number' },
            min: { type: 'number' },
            max_length: { type: 'integer', minimum: 0 },
            allowed: { type: 'array', minItems: 1, items: { type: ['string', 'number', 'boolean'] } },
            forbidden: { type: 'boolean' },
          },
        },
      },
    },
  },
  create(options) {
    const rules = options.fields;
    const cap = options.max_tokens;
    /** List fields and their most entries. */
    const listCaps: [string, number][] = [];
    if (options.max_messages !== undefined) listCaps.push(['messages', options.max_messages]);
    if (options.max_inputs !== undefined) listCaps.push(['input', options.max_inputs]);
    return {
      onRequest(req: PluginRequest) {
        const body = req.json();
        if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
        const b = body as Body;
        if (cap !== undefined) {
          let clamped: Body | null = null;
          let asked = false;
          for (const f of ['max_tokens', 'max_completion_tokens']) {
            const v = b[f];
            if (v === undefined || v === null) continue;
            asked = true;
            const n = numberOf(v);
            if (n <= cap) continue;
            if (!options.clamp_max_tokens || Number.isNaN(n)) {
              const got = Number.isNaN(n) ? JSON.stringify(v).slice(0, 40) : String(n);
              req.reject(400, `${f} must be at most ${cap} on this route (got ${got})`, 'invalid_value', f);
              return;
            }
            clamped = { ...(clamped ?? b), [f]: cap };
            req.tag('max_tokens_clamped', String(n));
          }
          // A generation that asks for no limit would get the server's (on vLLM, the rest of the
          // context window): it gets the cap.
          if (!asked && ('messages' in b || 'prompt' in b)) {
            clamped = { ...b, max_tokens: cap };
            req.tag('max_tokens_defaulted', String(cap));
          }
          if (clamped !== null) req.setBody(clamped);
        }
        for (const [field, max] of listCaps) {
          const list = b[field];
          if (!Array.isArray(list) || list.length <= max) continue;
          req.reject(
            400,
            `${field} must hold at most ${max} entries (got ${list.length})`,
            'invalid_value',
            field,
          );
          return;
        }
        for (const r of rules) {
          const problem = fieldProblem(b, r);
          if (problem !== null) {
            req.reject(400, problem, 'invalid_value', r.field);
            return;
          }
        }
      },
    };
  },
});
