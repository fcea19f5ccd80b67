/**
 * What the core reads from a request body it otherwise forwards untouched: the parsed JSON, once,
 * on demand, only when routing, affinity, limits or load estimation need it.
 */

/**
 * The body parsed as JSON, or null when it is absent or not JSON. A leading UTF-8 byte order mark
 * is skipped, as the Python servers behind Sluice skip it (`json.loads` of bytes): the body is read
 * as the node will read it.
 */
export function parseJsonBody(body: Buffer | null): unknown {
  if (body === null) return null;
  const start = body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  try {
    return JSON.parse(body.toString('utf8', start)) as unknown;
  } catch {
    return null;
  }
}
