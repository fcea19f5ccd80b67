/**
 * Helpers shared by the simulator tests: profiles derived from `fast`, JSON posts, an SSE reader
 * that reports how a stream ended (the load tester's own SSE and Prometheus parsers), a metric
 * scraper and a deadline poller. No test logic here.
 */

import { SseParser } from '../../../loadtest/client/sse-parser.js';
import { parsePromText } from '../../../loadtest/env/prom-text.js';
import { loadSimProfile } from '../../../loadtest/sim/profile-loader.js';
import type { SimProfile } from '../../../loadtest/sim/profile.js';

/** The `fast` profile with some keys replaced. */
export function fastProfile(overrides: Partial<SimProfile> = {}): SimProfile {
  return { ...loadSimProfile('fast'), ...overrides };
}

/** POSTs a JSON body. */
export function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: signal ?? null,
  });
}

/** What an SSE body delivered and how it ended. */
export interface SseResult {
  /** `data:` payloads in order, including `[DONE]` if it came. */
  events: string[];
  /** Milliseconds from `start` to each event. */
  times: number[];
  /** The error that cut the stream, if it did not end cleanly. */
  error: unknown;
}

/** Reads a whole SSE body; never throws (a cut stream is reported in `error`). */
export async function readSse(res: Response, start = performance.now()): Promise<SseResult> {
  const out: SseResult = { events: [], times: [], error: undefined };
  if (res.body === null) return out;
  const parser = new SseParser((data) => {
    out.events.push(data);
    out.times.push(performance.now() - start);
  });
  const reader: ReadableStreamDefaultReader<Uint8Array> = res.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(value);
    }
    parser.end();
  } catch (err) {
    out.error = err;
  }
  return out;
}

/** Reads the value of the first sample of `name` from a node's `/metrics`; NaN when absent. */
export async function scrapeMetric(baseUrl: string, name: string): Promise<number> {
  const samples = parsePromText(await (await fetch(`${baseUrl}/metrics`)).text());
  return samples.find((s) => s.name === name)?.value ?? Number.NaN;
}

/** Polls `check` every few ms until it returns true; throws with `what` after `timeoutMs`. */
export async function pollUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 3000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A chat request body with one user message. */
export function chatBody(content: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: 'sim-chat', messages: [{ role: 'user', content }], ...extra };
}

/**
 * The smallest of `runs` measurements. Upper bounds on a latency are checked against the minimum so
 * that a loaded test machine (one slow run) cannot fail them; lower bounds need no such care.
 */
export async function minOf(runs: number, measure: () => Promise<number>): Promise<number> {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) best = Math.min(best, await measure());
  return best;
}
