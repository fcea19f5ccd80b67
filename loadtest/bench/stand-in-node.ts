/**
 * The proxy benchmark's upstream: a uWebSockets.js server that stands in for an inference node at
 * the least possible cost, so the machine's CPU goes to the proxy under test. It answers
 * `POST /v1/chat/completions` with the fixed completion of `chat-fixtures.ts` (at once or after a
 * delay), or, when the body says `"stream": true`, with the fixed SSE stream (all writes at once, or
 * one write every `chunkGapMs`). It models no GPU: the simulator in `loadtest/sim/` does that.
 */
import {
  App,
  us_listen_socket_close,
  us_socket_local_port,
  type HttpResponse,
  type us_listen_socket,
} from 'uWebSockets.js';
import { COMPLETION_BODY, STREAM_WRITES } from './chat-fixtures.js';

/** How the stand-in answers. */
export interface StandInOptions {
  /** Port on 127.0.0.1; 0 picks a free one. */
  port: number;
  /** Delay before a non-streamed answer (and before a stream's head), ms; 0 answers at once. */
  delayMs: number;
  /** Gap between two SSE writes, ms; 0 writes the whole stream at once. */
  chunkGapMs: number;
}

/** A running stand-in. */
export interface StandIn {
  readonly port: number;
  close(): void;
}

const COMPLETION = Buffer.from(COMPLETION_BODY);
const WRITES = STREAM_WRITES.map((s) => Buffer.from(s));
const STREAM_MARK = Buffer.from('"stream":true');
const HEALTH = Buffer.from('ok');

/** One stream being paced out. */
class PacedStream {
  /** Index of the next write in WRITES. */
  next = 0;
  aborted = false;
  constructor(readonly res: HttpResponse) {}
}

function writeCompletion(res: HttpResponse): void {
  res.cork(() => {
    res.writeStatus('200 OK').writeHeader('content-type', 'application/json').end(COMPLETION);
  });
}

function writeStreamHead(res: HttpResponse): void {
  res.writeStatus('200 OK');
  res.writeHeader('content-type', 'text/event-stream');
  res.writeHeader('cache-control', 'no-cache');
}

function writeWholeStream(res: HttpResponse): void {
  res.cork(() => {
    writeStreamHead(res);
    for (const w of WRITES) res.write(w);
    res.end();
  });
}

/** Starts a stand-in; resolves once it listens. Rejects when the port cannot be bound. */
export async function startStandIn(options: StandInOptions): Promise<StandIn> {
  const { delayMs, chunkGapMs } = options;
  // Paced streams advance together on one timer: one write each per tick.
  const paced: PacedStream[] = [];
  let ticker: NodeJS.Timeout | null = null;
  const tick = (): void => {
    let kept = 0;
    for (const s of paced) {
      if (s.aborted) continue;
      const last = s.next === WRITES.length - 1;
      const chunk = WRITES[s.next++]!;
      s.res.cork(() => {
        if (last) s.res.end(chunk);
        else s.res.write(chunk);
      });
      if (!last) paced[kept++] = s;
    }
    paced.length = kept;
  };
  const startStream = (res: HttpResponse, s: PacedStream | null): void => {
    if (s === null) {
      writeWholeStream(res);
      return;
    }
    if (s.aborted) return;
    res.cork(() => {
      writeStreamHead(res);
      res.write(WRITES[s.next++]!);
    });
    paced.push(s);
  };

  const app = App()
    .post('/v1/chat/completions', (res) => {
      const parts: Buffer[] = [];
      let aborted = false;
      const stream = chunkGapMs > 0 ? new PacedStream(res) : null;
      res.onAborted(() => {
        aborted = true;
        if (stream !== null) stream.aborted = true;
      });
      res.onData((chunk, isLast) => {
        parts.push(Buffer.from(new Uint8Array(chunk)));
        if (!isLast) return;
        const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
        const streamed = body.indexOf(STREAM_MARK) >= 0 || body.indexOf('"stream": true') >= 0;
        const answer = (): void => {
          if (aborted) return;
          if (streamed) startStream(res, stream);
          else writeCompletion(res);
        };
        if (delayMs > 0) setTimeout(answer, delayMs);
        else answer();
      });
    })
    .get('/health', (res) => {
      res.end(HEALTH);
    })
    .any('/*', (res) => {
      res.writeStatus('404 Not Found').end('not found');
    });

  const socket = await new Promise<us_listen_socket | false>((resolve) =>
    app.listen('127.0.0.1', options.port, resolve),
  );
  if (socket === false) throw new Error(`stand-in: cannot listen on 127.0.0.1:${options.port}`);
  if (chunkGapMs > 0) ticker = setInterval(tick, chunkGapMs);
  return {
    port: us_socket_local_port(socket),
    close(): void {
      if (ticker !== null) clearInterval(ticker);
      for (const s of paced) if (!s.aborted) s.res.close();
      paced.length = 0;
      us_listen_socket_close(socket);
      app.close();
    },
  };
}
