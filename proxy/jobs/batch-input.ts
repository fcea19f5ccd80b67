/**
 * Parses and validates a batch input file (JSONL, one OpenAI batch request per line:
 * `{custom_id, method, url, body}`). Pure logic: no I/O, no database.
 */

import { rawMember, repeatsMember } from '../lifecycle/json-spans.js';
import { JobError, JobErrors } from './job-errors.js';

/** One validated input line. */
export interface BatchInputLine {
  /** 1-based line number in the uploaded file. */
  line: number;
  customId: string;
  method: 'POST';
  url: string;
  body: Record<string, unknown>;
  /**
   * The body's JSON text exactly as the line has it: what the node is sent (a re-serialised body
   * would change numbers beyond double precision, such as a 64-bit `seed`).
   */
  raw: string;
}

/** Limits applied while parsing. */
export interface BatchInputLimits {
  /** Most requests in one file. Default 50,000 (OpenAI's limit). */
  maxLines?: number;
  /** Longest `custom_id`, characters. Default 512. */
  maxCustomIdLength?: number;
}

const KEYS = new Set(['custom_id', 'method', 'url', 'body']);

/**
 * Parses `content` into request lines. Blank lines are skipped (a trailing newline is normal), but
 * line numbers in errors are 1-based positions in the file as uploaded. Throws a `JobError`
 * (`invalid_file`) naming the first bad line: not JSON, not an object, a missing or mistyped field,
 * an unknown field, a method other than POST, a URL not starting with `/v1/`, or a `custom_id`
 * already used on an earlier line.
 */
export function parseBatchInput(content: string, limits: BatchInputLimits = {}): BatchInputLine[] {
  const maxLines = limits.maxLines ?? 50_000;
  const maxIdLength = limits.maxCustomIdLength ?? 512;
  const out: BatchInputLine[] = [];
  const seen = new Map<string, number>();
  const lines = content.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const text = (lines[i] ?? '').trim();
    if (text === '') continue;
    const lineNo = i + 1;
    const fail = (message: string, param: string | null = null): never => {
      throw new JobError(JobErrors.invalidFile, `line ${lineNo}: ${message}`, param, lineNo);
    };
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      fail('not valid JSON');
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) fail('not a JSON object');
    const obj = parsed as Record<string, unknown>;
    for (const key of Object.keys(obj)) if (!KEYS.has(key)) fail(`unknown field "${key}"`, key);
    const { custom_id: customId, method, url, body } = obj;
    if (typeof customId !== 'string' || customId === '')
      fail('"custom_id" must be a non-empty string', 'custom_id');
    const id = customId as string;
    if (id.length > maxIdLength) fail(`"custom_id" is longer than ${maxIdLength} characters`, 'custom_id');
    if (method !== 'POST') fail('"method" must be "POST"', 'method');
    if (typeof url !== 'string' || !url.startsWith('/v1/'))
      fail('"url" must be a path starting with /v1/', 'url');
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      fail('"body" must be a JSON object', 'body');
    // An output line holds the whole response as a JSON object: an event stream has no place there.
    if ((body as Record<string, unknown>)['stream'] === true)
      fail('"body.stream" must not be true: batch results carry whole responses', 'body.stream');
    const first = seen.get(id);
    if (first !== undefined) fail(`duplicate custom_id "${id}" (first used on line ${first})`, 'custom_id');
    seen.set(id, lineNo);
    out.push({
      line: lineNo,
      customId: id,
      method: 'POST',
      url: url as string,
      body: body as Record<string, unknown>,
      raw: asWritten(rawMember(text, 'body')) ?? JSON.stringify(body),
    });
    if (out.length > maxLines) fail(`more than ${maxLines} requests`);
  }
  if (out.length === 0) {
    throw new JobError(JobErrors.invalidFile, 'the file holds no requests', null, null);
  }
  return out;
}

/** A body's source text, unless it names a field twice (then null: it is sent serialised again). */
function asWritten(raw: string | null): string | null {
  return raw === null || repeatsMember(raw) ? null : raw;
}
