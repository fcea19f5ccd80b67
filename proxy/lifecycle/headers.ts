/**
 * Header rules shared by both directions: which headers are hop-by-hop (RFC 9110 §7.6.1) and are
 * never forwarded, and the building of the response header list sent to the client.
 */

/**
 * Request and response headers a proxy consumes rather than forwards. `content-length` and `host`
 * are recomputed for the next hop; `date` is written by the server itself.
 */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * Request headers never forwarded to a node: the hop-by-hop ones, and `proxy-authorization`, the
 * client's credentials for a proxy (RFC 9110 §11.7.2): Sluice asks for none, and a node must not
 * see them.
 */
export const REQUEST_NOT_FORWARDED: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'proxy-authorization']);

/** Response headers never copied from the node to the client. */
const RESPONSE_SKIP: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'content-length', 'date', 'x-request-id']);

/**
 * Builds the client response headers from the node's parsed headers: drops hop-by-hop and the ones
 * the server writes itself, keeps repeated values (set-cookie), and adds `x-request-id`.
 */
export function responseHeaders(
  headers: Record<string, string | string[] | undefined>,
  requestId: string,
): string[] {
  // HOT
  const out: string[] = [];
  const named = connectionTokens(headers['connection']);
  for (const name in headers) {
    if (RESPONSE_SKIP.has(name)) continue;
    if (named !== null && named.has(name)) continue;
    const v = headers[name];
    if (typeof v === 'string') out.push(name, v);
    else if (v !== undefined) for (const x of v) out.push(name, x);
  }
  out.push('x-request-id', requestId);
  return out;
}

/**
 * Header names listed in a `Connection` header (RFC 9110 §7.6.1: they are hop-by-hop too), or null
 * when it names none beyond the usual `close` / `keep-alive`.
 */
export function connectionTokens(value: string | string[] | undefined): Set<string> | null {
  if (value === undefined) return null;
  const v = (typeof value === 'string' ? value : value.join(',')).toLowerCase();
  if (v === 'close' || v === 'keep-alive') return null;
  const names = new Set<string>();
  for (const t of v.split(',')) {
    const name = t.trim();
    if (name !== '' && name !== 'close' && name !== 'keep-alive') names.add(name);
  }
  return names.size > 0 ? names : null;
}
