/**
 * Test transport: a real HTTP client (Node's global `fetch`) to one simulated node, wrapped with
 * counters (calls, items, inputs, concurrency, send times) and per-text fault injection through the
 * simulator's `x-sim-status` header. Also a poll-with-deadline helper and body builders.
 */

import { nowMs } from '../../proxy/lifecycle/clock.js';
import type { BatchResponse, BatchTransport } from '../../proxy/batch/batch-transport.js';

/** The embedding width of the `fast` profile. */
export const DIM = 64;

/** An embeddings request body for one text. */
export function embed(input: string | string[], extra: Record<string, unknown> = {}): object {
  return { model: 'sim-embed', input, ...extra };
}

/** A counting `fetch` transport to `${url}${path}`. */
export class SimTransport implements BatchTransport {
  /** Upstream calls sent. */
  calls = 0;
  /** Items carried, per call, in call order. */
  readonly itemsPerCall: number[] = [];
  /** Every input text sent, in order (repeats included). */
  readonly inputsSent: string[] = [];
  /** Monotonic ms of each call's start. */
  readonly sentAtMs: number[] = [];
  /** Calls in flight now, and the most seen at once. */
  running = 0;
  maxRunning = 0;
  /** Texts whose calls answer 500: the count is how many more times (Infinity: always). */
  readonly failures = new Map<string, number>();
  /** Extra headers on every call (e.g. `x-sim-stall-ms`). */
  extraHeaders: Record<string, string> = {};

  constructor(
    readonly url: string,
    readonly path = '/v1/embeddings',
  ) {}

  async send(body: Buffer, items: number): Promise<BatchResponse> {
    this.calls++;
    this.sentAtMs.push(nowMs());
    this.itemsPerCall.push(items);
    const parsed = JSON.parse(body.toString('utf8')) as { input: string | string[] };
    const inputs = typeof parsed.input === 'string' ? [parsed.input] : parsed.input;
    this.inputsSent.push(...inputs);
    const headers: Record<string, string> = { 'content-type': 'application/json', ...this.extraHeaders };
    for (const text of inputs) {
      const left = this.failures.get(text) ?? 0;
      if (left > 0) {
        this.failures.set(text, left - 1);
        headers['x-sim-status'] = '500';
      }
    }
    this.running++;
    if (this.running > this.maxRunning) this.maxRunning = this.running;
    try {
      const res = await fetch(`${this.url}${this.path}`, { method: 'POST', body, headers });
      return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
    } finally {
      this.running--;
    }
  }
}

/** Polls `cond` every millisecond until it holds; rejects after `deadlineMs`. */
export async function waitFor(cond: () => boolean, deadlineMs = 2000): Promise<void> {
  const end = nowMs() + deadlineMs;
  while (!cond()) {
    if (nowMs() > end) throw new Error('condition not met before the deadline');
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Parses a result body as JSON. */
export function json(body: Buffer): Record<string, unknown> {
  return JSON.parse(body.toString('utf8')) as Record<string, unknown>;
}

/** The single embedding of an embeddings answer with its index, asserting the shape loosely. */
export function onlyEmbedding(body: Buffer): { index: number; embedding: number[]; count: number } {
  const data = json(body)['data'] as { index: number; embedding: number[] }[];
  const first = data[0];
  if (first === undefined) throw new Error('no data in embeddings answer');
  return { index: first.index, embedding: first.embedding, count: data.length };
}

/** Number of live `setTimeout`/`setInterval` handles in the process. */
export function activeTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}
