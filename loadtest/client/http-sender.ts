/**
 * Sends planned requests over undici keep-alive connections and measures them: end-to-end time,
 * and for SSE streams the first token and the gaps between tokens (autocannon cannot see inside a
 * stream). Spreads requests round-robin over several base URLs when given more than one (direct to
 * a fleet). Every failure becomes an outcome with an error category; nothing here throws.
 */

import { Agent } from 'undici';
import type { PlannedRequest } from '../workload/planned-request.js';
import { SseParser } from './sse-parser.js';

/** How one request ended. Times are `performance.now()` milliseconds. */
export interface Outcome {
  /** HTTP status, or 0 when no response head arrived. */
  status: number;
  /** Null on success; else a category: an errno code (`ECONNREFUSED`), `timeout`, `http_STATUS`, `stream_error`, `stream_truncated`, `unfinished`. */
  error: string | null;
  /** When the request was handed to the connection. */
  sentAt: number;
  /** When the response completed (or failed). */
  endAt: number;
  /** When the first token arrived (streams), else null. */
  firstTokenAt: number | null;
  /** Tokens (content events) received in a stream. */
  tokens: number;
  /**
   * Gaps between consecutive tokens of a stream, ms, in arrival order (empty otherwise); kept with the
   * outcome so that only the gaps of streams that complete are recorded.
   */
  gaps: number[];
  /** The assistant text, when the request belongs to a chat session; else null. */
  reply: string | null;
}

/** Told of a stream's content tokens as they arrive; the drivers pass their phase's `Recorder`. */
export interface StreamObserver {
  /** A content token arrived at `at` (`performance.now()` ms). */
  noteToken(at: number): void;
}

interface ChunkChoice {
  delta?: { content?: string | null };
  text?: string;
}

/** Why a request was aborted by us. */
const Abort = { timeout: 'timeout', stop: 'unfinished' } as const;

function errorCategory(err: unknown, reason: string | undefined): string {
  if (reason !== undefined) return reason;
  const e = err as { code?: unknown; cause?: { code?: unknown } };
  const code =
    typeof e.cause?.code === 'string' ? e.cause.code : typeof e.code === 'string' ? e.code : 'error';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'timeout';
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return 'connect_timeout';
  if (code === 'UND_ERR_SOCKET') return 'ECONNRESET';
  return code;
}

/** Sends requests to one target (or round-robin over several base URLs). */
export class HttpSender {
  private readonly agent: Agent;
  /** Requests in flight, each with the function that aborts it for a reason. */
  private readonly inFlight = new Set<(why: string) => void>();
  private next = 0;

  /**
   * @param origins - base URLs, e.g. `http://127.0.0.1:8080`
   * @param connections - most connections per origin
   * @param timeoutMs - per-request limit, head and body together
   */
  constructor(
    private readonly origins: readonly string[],
    connections: number,
    private readonly timeoutMs: number,
  ) {
    this.agent = new Agent({
      connections,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      connect: { timeout: 5_000 },
    });
  }

  /** Requests in flight now. */
  get active(): number {
    return this.inFlight.size;
  }

  /** Sends `req`; `observer` hears of each streamed token as it arrives. Resolves when the response is complete or failed. */
  async send(req: PlannedRequest, observer: StreamObserver): Promise<Outcome> {
    const origin = this.origins[this.next++ % this.origins.length] as string;
    const controller = new AbortController();
    let reason: string | undefined;
    const stop = (why: string): void => {
      reason ??= why;
      controller.abort();
    };
    const timer = setTimeout(stop, this.timeoutMs, Abort.timeout);
    this.inFlight.add(stop);
    const out: Outcome = {
      status: 0,
      error: null,
      sentAt: performance.now(),
      endAt: 0,
      firstTokenAt: null,
      tokens: 0,
      gaps: [],
      reply: null,
    };
    try {
      const res = await this.agent.request({
        origin,
        path: req.path,
        method: 'POST',
        headers: req.headers,
        body: req.body,
        signal: controller.signal,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      out.status = res.statusCode;
      if (res.statusCode < 200 || res.statusCode >= 300) {
        await res.body.dump({ limit: 1 << 20 });
        out.error = `http_${res.statusCode}`;
      } else if (req.stream) {
        await this.readStream(res.body, req.session !== null, out, observer);
      } else {
        const text = await res.body.text();
        if (req.session !== null) out.reply = replyOf(text);
      }
    } catch (err) {
      out.error = errorCategory(err, reason);
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(stop);
      out.endAt = performance.now();
    }
    return out;
  }

  /** Aborts every request in flight; they end with error `unfinished`. */
  abortAll(): void {
    for (const stop of [...this.inFlight]) stop(Abort.stop);
  }

  /** Closes the connections (after `abortAll`, or once nothing is in flight). */
  async close(): Promise<void> {
    await this.agent.destroy();
  }

  private async readStream(
    body: AsyncIterable<Uint8Array>,
    keepText: boolean,
    out: Outcome,
    observer: StreamObserver,
  ): Promise<void> {
    let last = 0;
    let done = false;
    const parts: string[] = [];
    const parser = new SseParser((data) => {
      if (data === '[DONE]') {
        done = true;
        return;
      }
      let event: { choices?: ChunkChoice[]; error?: unknown };
      try {
        event = JSON.parse(data) as typeof event;
      } catch {
        out.error ??= 'stream_error';
        return;
      }
      if (event.error !== undefined) {
        out.error ??= 'stream_error';
        return;
      }
      const choice = event.choices?.[0];
      const text = choice?.delta?.content ?? choice?.text ?? '';
      if (text === '') return;
      const now = performance.now();
      observer.noteToken(now);
      if (out.firstTokenAt === null) out.firstTokenAt = now;
      else out.gaps.push(now - last);
      last = now;
      out.tokens++;
      if (keepText) parts.push(text);
    });
    for await (const chunk of body) parser.push(chunk);
    parser.end();
    if (!done) out.error ??= 'stream_truncated';
    if (keepText) out.reply = parts.join('');
  }
}

/** The assistant text of a non-streamed chat completion body, or '' when it has none. */
export function replyOf(text: string): string {
  try {
    const body = JSON.parse(text) as { choices?: { message?: { content?: string | null } }[] };
    return body.choices?.[0]?.message?.content ?? '';
  } catch {
    return '';
  }
}
