/**
 * What the core reads from a request body it otherwise forwards untouched: the parsed JSON (once,
 * on demand, only when routing, affinity or load estimation needs it) and the estimated work.
 */

/** Output tokens assumed for a generation request that gives no max_tokens. */
const DEFAULT_MAX_TOKENS = 256;
/** Characters per token, the usual estimate for English text with BPE tokenizers. */
const CHARS_PER_TOKEN = 4;

/** The body parsed as JSON, or null when it is absent or not JSON. */
export function parseJsonBody(body: Buffer | null): unknown {
  if (body === null) return null;
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return null;
  }
}

/**
 * Estimated tokens of work: the body's size as prompt tokens (the JSON syntax makes this a slight
 * over-estimate, never an under-estimate) plus the requested output (`max_tokens`,
 * `max_completion_tokens`, or a default for generation requests; none for embeddings).
 */
export function estimateCost(body: Buffer | null, json: unknown): number {
  const prompt = body === null ? 0 : Math.ceil(body.length / CHARS_PER_TOKEN);
  let output = 0;
  if (typeof json === 'object' && json !== null) {
    const j = json as { max_tokens?: unknown; max_completion_tokens?: unknown; input?: unknown };
    if (typeof j.max_tokens === 'number') output = j.max_tokens;
    else if (typeof j.max_completion_tokens === 'number') output = j.max_completion_tokens;
    else if (j.input === undefined) output = DEFAULT_MAX_TOKENS;
  }
  const cost = prompt + (output > 0 ? output : 0);
  return cost >= 1 ? cost : 1;
}
