/**
 * Which requests response-cache may answer from a stored answer, and their keys. Only deterministic
 * requests: embeddings, and chat or text completions with `temperature: 0`, one choice and no tools
 * (a tool call's answer depends on what the client does next). The key is a SHA-256 of the tenant,
 * the route, the path, the model the client named (when an alias renamed it) and the body in
 * canonical form (keys sorted, `stream`, `stream_options` and `user` left out, so a streamed and an
 * unstreamed request share the answer).
 */
import { createHash } from 'node:crypto';

/** Kinds of cacheable requests. */
export type CacheableKind = 'chat' | 'completion' | 'embedding';

const IGNORED = new Set(['stream', 'stream_options', 'user']);

/** The kind of `path` + `body` when its answer is deterministic, else null. */
export function cacheableKind(path: string, body: unknown): CacheableKind | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return null;
  const b = body as Record<string, unknown>;
  let kind: CacheableKind;
  if (path.endsWith('/embeddings')) return 'embedding';
  if (path.endsWith('/chat/completions')) kind = 'chat';
  else if (path.endsWith('/completions')) kind = 'completion';
  else return null;
  if (b['temperature'] !== 0) return null;
  if (b['n'] !== undefined && b['n'] !== 1) return null;
  if (b['tools'] !== undefined || b['functions'] !== undefined || b['tool_choice'] !== undefined) return null;
  return kind;
}

/** JSON with object keys sorted at every level; `top` drops the ignored top-level keys. */
export function canonicalJson(v: unknown, top = false): string {
  if (Array.isArray(v)) return `[${v.map((x) => canonicalJson(x)).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const keys = Object.keys(v)
      .filter((k) => !(top && IGNORED.has(k)))
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/**
 * The cache key of a request. `route` is the matched route's name: routes may send one body to
 * pools that answer it differently, and one instance may serve several routes. `publicModel` is
 * the model the client named when a plugin before the cache renamed it in the body (model-alias's
 * `public_model` tag), else '': the answer names it, so two public names of one pool model must
 * not share answers.
 */
export function cacheKey(
  tenant: string,
  route: string,
  path: string,
  body: unknown,
  publicModel = '',
): string {
  return createHash('sha256')
    .update(tenant)
    .update('\n')
    .update(route)
    .update('\n')
    .update(path)
    .update('\n')
    .update(publicModel)
    .update('\n')
    .update(canonicalJson(body, true))
    .digest('base64url');
}
