/**
 * header-rules: set, remove and rename request headers (on each attempt to the node) and response
 * headers (before they go to the client), per route. Values may use `${tenant}`, `${request_id}`,
 * `${route}`, `${pool}` and `${env:NAME}`; environment values are read once, when the plugin is
 * created (a missing variable rejects the config).
 */
import { definePlugin, MANAGED_HEADERS, SERVER_RESPONSE_HEADERS, type PluginRequest } from '../api.js';

interface Rules {
  set: Record<string, string>;
  remove: string[];
  rename: Record<string, string>;
}

interface Options {
  request: Rules;
  response: Rules;
}

const HEADER = "^[a-z0-9!#$%&'*+.^_`|~-]+$";
const rulesSchema = {
  type: 'object',
  additionalProperties: false,
  default: {},
  properties: {
    set: {
      type: 'object',
      default: {},
      propertyNames: { pattern: HEADER },
      additionalProperties: { type: 'string' },
      description:
        'Header (lower-case) to value; the value may use ${tenant}, ${request_id}, ${route}, ${pool}, ${env:NAME}.',
    },
    remove: { type: 'array', default: [], items: { type: 'string', pattern: HEADER } },
    rename: {
      type: 'object',
      default: {},
      propertyNames: { pattern: HEADER },
      additionalProperties: { type: 'string', pattern: HEADER },
      description: 'Old name to new name; every value moves.',
    },
  },
};

const VAR = /\$\{(tenant|request_id|route|pool|env:[A-Za-z_][A-Za-z0-9_]*)\}/g;

/** A value template split once into literal parts and request variables. */
class Template {
  /** Literal text, then a variable name, alternating; starts and ends with literal text. */
  private readonly parts: string[];
  readonly constant: boolean;

  constructor(text: string) {
    const parts = [''];
    let last = 0;
    for (const m of text.matchAll(VAR)) {
      const name = m[1]!;
      parts[parts.length - 1] += text.slice(last, m.index);
      if (name.startsWith('env:')) {
        const env = process.env[name.slice(4)];
        if (env === undefined) throw new Error(`environment variable ${name.slice(4)} is not set`);
        parts[parts.length - 1] += env;
      } else {
        parts.push(name, '');
      }
      last = m.index + m[0].length;
    }
    parts[parts.length - 1] += text.slice(last);
    this.parts = parts;
    this.constant = parts.length === 1;
  }

  render(req: PluginRequest): string {
    if (this.constant) return this.parts[0]!;
    let out = '';
    for (let i = 0; i < this.parts.length; i++) {
      const p = this.parts[i]!;
      if (i % 2 === 0) out += p;
      else if (p === 'tenant') out += req.tenant;
      else if (p === 'request_id') out += req.id;
      else if (p === 'route') out += req.route ?? '';
      else out += req.pool ?? '';
    }
    return out;
  }
}

interface Compiled {
  set: [string, Template][];
  remove: string[];
  rename: [string, string][];
}

/** Refuses a rule on a header Sluice manages, naming the side and the option (at config load). */
function checkNames(side: string, r: Rules): void {
  const names: [string, string][] = [
    ...Object.keys(r.set).map((n): [string, string] => ['set', n]),
    ...r.remove.map((n): [string, string] => ['remove', n]),
    ...Object.entries(r.rename).flatMap(([from, to]): [string, string][] => [
      ['rename', from],
      ['rename', to],
    ]),
  ];
  for (const [option, name] of names) {
    if (MANAGED_HEADERS.has(name.toLowerCase()))
      throw new Error(`${side}.${option}: header ${name} is managed by Sluice (framing and the connection)`);
    // The server writes the answer's Date itself; a second one is refused when a request runs.
    if (side === 'response' && option !== 'remove' && SERVER_RESPONSE_HEADERS.has(name.toLowerCase()))
      throw new Error(`${side}.${option}: header ${name} is written by the server`);
  }
}

/** A value set as written (no `${...}` left after the environment): checked now, not per request. */
function checkValue(side: string, name: string, t: Template): Template {
  if (!t.constant) return t;
  const v = t.render(null as unknown as PluginRequest);
  if (/[\r\n\0]/.test(v))
    throw new Error(`${side}.set: header ${name}: the value must not contain CR, LF or NUL`);
  if (/[^\x00-\xff]/.test(v))
    throw new Error(`${side}.set: header ${name}: the value must be a byte string (characters up to U+00FF)`);
  return t;
}

function compile(side: string, r: Rules): Compiled | null {
  checkNames(side, r);
  const c: Compiled = {
    set: Object.entries(r.set).map(([k, v]) => [k, checkValue(side, k, new Template(v))]),
    remove: r.remove,
    rename: Object.entries(r.rename),
  };
  return c.set.length + c.remove.length + c.rename.length === 0 ? null : c;
}

export default definePlugin<Options>({
  name: 'header-rules',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: { request: rulesSchema, response: rulesSchema },
  },
  create(options) {
    const request = compile('request', options.request);
    const response = compile('response', options.response);
    // Only the phases with rules get a hook: a side without rules costs nothing.
    return {
      ...(request === null
        ? {}
        : {
            onUpstreamRequest(req: PluginRequest) {
              for (const [from, to] of request.rename) {
                const v = req.header(from);
                if (v === undefined) continue;
                req.removeHeader(from);
                req.setHeader(to, v);
              }
              for (const name of request.remove) req.removeHeader(name);
              for (const [name, t] of request.set) req.setHeader(name, t.render(req));
            },
          }),
      ...(response === null
        ? {}
        : {
            onResponseHead(req: PluginRequest) {
              for (const [from, to] of response.rename) {
                const v = req.responseHeader(from);
                if (v === undefined) continue;
                req.removeResponseHeader(from);
                req.setResponseHeader(to, v);
              }
              for (const name of response.remove) req.removeResponseHeader(name);
              for (const [name, t] of response.set) req.setResponseHeader(name, t.render(req));
            },
          }),
    };
  },
});
