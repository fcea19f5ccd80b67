/**
 * Item results of the Redis batch-job backend: how a result is stored (one JSON value per item,
 * the Lua scripts write the failure ones) and how a batch's output and error files are rendered
 * from them, in input order, with the same lines as the SQLite backend. It reads Redis through the
 * function it is given and never writes.
 */

import { outputLine } from './batch-files.js';
import type { ItemFailure } from './item-queue.js';
import type { ItemResult } from './job-types.js';

/** A stored result: `o` outcome, `s` HTTP status, `b` response body, `c`/`m` error code and message. */
interface StoredResult {
  o: 'completed' | 'failed';
  s?: number | null;
  b?: unknown;
  c?: string | null;
  m?: string | null;
}

/** A result ready for the `record` script: 2xx is `completed`, any other status `failed`. */
export function encodeResult(result: ItemResult): { outcome: 'completed' | 'failed'; json: string } {
  const outcome = result.status >= 200 && result.status < 300 ? 'completed' : 'failed';
  const stored: StoredResult = { o: outcome, s: result.status, b: result.body ?? null };
  return { outcome, json: JSON.stringify(stored) };
}

/** A failure without a response, ready for the `record` script. */
export function encodeFailure(failure: ItemFailure): { outcome: 'failed'; json: string } {
  const stored: StoredResult = { o: 'failed', c: failure.code, m: failure.message };
  return { outcome: 'failed', json: JSON.stringify(stored) };
}

/** Reads Redis: one command, its reply. */
export type RedisRead = <T>(args: string[]) => Promise<T>;

/** Where a batch's items live and how many there are. */
export interface RenderTarget {
  /** Key of the results hash (index -> stored result). */
  resultsKey: string;
  /** Key of the custom-id hash (index -> custom_id). */
  customIdsKey: string;
  /** Id of item 0; item `i` has id `firstItem + i`. */
  firstItem: number;
  /** Items in the batch. */
  total: number;
}

/**
 * The lines of a batch's output file (`completed` items) or error file (every other finished
 * item), in input order, each a JSON text without the newline. Reads `chunk` items per round trip.
 */
export async function renderResultLines(
  read: RedisRead,
  target: RenderTarget,
  kind: 'output' | 'error',
  chunk = 1000,
): Promise<string[]> {
  const want = kind === 'output' ? 'completed' : 'failed';
  const lines: string[] = [];
  const rounds: Promise<[(string | null)[], (string | null)[]]>[] = [];
  for (let from = 0; from < target.total; from += chunk) {
    const fields: string[] = [];
    for (let i = from; i < Math.min(target.total, from + chunk); i++) fields.push(String(i));
    rounds.push(
      Promise.all([
        read<(string | null)[]>(['HMGET', target.resultsKey, ...fields]),
        read<(string | null)[]>(['HMGET', target.customIdsKey, ...fields]),
      ]),
    );
  }
  let index = 0;
  for (const [results, customIds] of await Promise.all(rounds)) {
    for (let j = 0; j < results.length; j++, index++) {
      const raw = results[j];
      if (raw === null || raw === undefined) continue;
      const stored = JSON.parse(raw) as StoredResult;
      if (stored.o !== want) continue;
      const line = outputLine(
        target.firstItem + index,
        customIds[j] ?? '',
        stored.s ?? null,
        stored.b,
        stored.c ?? null,
        stored.m ?? null,
      );
      lines.push(JSON.stringify(line));
    }
  }
  return lines;
}
