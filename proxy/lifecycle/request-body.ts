/**
 * What the core reads from a request body it otherwise forwards untouched: the parsed JSON, once,
 * on demand, only when routing, affinity, limits or load estimation need it.
 */

/** The body parsed as JSON, or null when it is absent or not JSON. */
export function parseJsonBody(body: Buffer | null): unknown {
  if (body === null) return null;
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return null;
  }
}
