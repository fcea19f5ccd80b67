/**
 * The structured access log: one JSON line per request (id, tenant, route, pool, node, model,
 * status, bytes, time to first token, duration, attempts, refusal reason), written by pino through
 * an asynchronous destination so that the event loop never waits on the disk or the pipe. Never
 * logs keys, bodies or query strings. Successful requests can be sampled; failures (a 4xx or 5xx
 * status, or an error code: a stream that broke after its head) are always written when their
 * level is enabled.
 */
import type { Logger, destination } from 'pino';
import { pinoPackage } from '../runtime/optional-modules.js';
import type { ObservedRequest, RequestRecord } from './request-record.js';

/** Access-log settings (`access_log` in the config). */
export interface AccessLogOptions {
  /** `stdout`, `stderr` or a file path (appended to, created with its directory). */
  destination: string;
  /**
   * Lowest level written: 2xx/3xx lines are `info`, 4xx `warn`, 5xx `error`; a request that failed
   * after its head went out (an error code with a 2xx status) is `error`.
   */
  level: 'debug' | 'info' | 'warn' | 'error';
  /** Share of `info` lines written, 0..1 (1: all). */
  sampleRate: number;
  /**
   * A worker thread's log: its lines go, in batches of whole lines, to this function (which posts
   * them to the main thread, whose log writes them with its own: one writer per destination);
   * `destination` is then not opened.
   */
  relay?: (text: string) => void;
}

/** How long a relayed log holds its lines before it sends them, ms. */
const RELAY_FLUSH_MS = 50;
/** Characters a relayed log holds before it sends them at once. */
const RELAY_MAX_CHARS = 64 * 1024;

/**
 * The stream a relayed access log writes to: collects pino's lines (each write is whole lines) and
 * hands them on every RELAY_FLUSH_MS, or at once past RELAY_MAX_CHARS.
 */
class LineRelay {
  private text = '';
  private timer: NodeJS.Timeout | null = null;
  private readonly send: (text: string) => void;
  private readonly tick = (): void => {
    this.timer = null;
    this.flushNow();
  };

  constructor(send: (text: string) => void) {
    this.send = send;
  }

  write(chunk: string): boolean {
    this.text += chunk;
    if (this.text.length >= RELAY_MAX_CHARS) this.flushNow();
    else if (this.timer === null) {
      this.timer = setTimeout(this.tick, RELAY_FLUSH_MS);
      this.timer.unref();
    }
    return true;
  }

  /** Sends what is held now (pino's `flush`). */
  flush(cb?: (err?: Error) => void): void {
    this.flushNow();
    cb?.();
  }

  private flushNow(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.text === '') return;
    const text = this.text;
    this.text = '';
    this.send(text);
  }
}

/** Longest body prefix searched for the `model` field, bytes. */
const MODEL_SCAN_BYTES = 4096;
const MODEL_KEY = Buffer.from('"model"');
const MODEL_VALUE = /^\s*:\s*"([^"\\]{1,200})"/;

/** The JSON `model` of a request body, when it appears in its first 4 KiB; else null. */
export function modelOf(body: Buffer | null): string | null {
  if (body === null) return null;
  const head = body.length > MODEL_SCAN_BYTES ? body.subarray(0, MODEL_SCAN_BYTES) : body;
  const at = head.indexOf(MODEL_KEY);
  if (at < 0) return null;
  const m = MODEL_VALUE.exec(head.toString('utf8', at + MODEL_KEY.length, Math.min(head.length, at + 260)));
  return m === null ? null : m[1]!;
}

export class AccessLog {
  private readonly logger: Logger;
  /** The destination this thread writes; null for a relayed log (a worker thread's). */
  private readonly dest: ReturnType<typeof destination> | null;
  private readonly sampleRate: number;
  /** True when the destination is a file this log owns (closed with it). */
  private readonly ownsFile: boolean;
  private readonly infoOn: boolean;
  private readonly warnOn: boolean;
  private readonly errorOn: boolean;
  /** Lines written and lines skipped by sampling (for tests and metrics). */
  written = 0;
  sampledOut = 0;

  constructor(options: AccessLogOptions) {
    const d = options.destination;
    const relay = options.relay;
    this.ownsFile = relay === undefined && d !== 'stdout' && d !== 'stderr';
    const { pino, destination, stdTimeFunctions } = pinoPackage();
    this.dest =
      relay !== undefined
        ? null
        : destination({
            dest: d === 'stdout' ? 1 : d === 'stderr' ? 2 : d,
            sync: false,
            mkdir: this.ownsFile,
            minLength: 0,
          });
    this.logger = pino(
      {
        level: options.level,
        base: null,
        messageKey: 'msg',
        timestamp: stdTimeFunctions.isoTime,
        formatters: { level: (label) => ({ level: label }) },
      },
      this.dest ?? new LineRelay(relay!),
    );
    this.sampleRate = options.sampleRate;
    this.infoOn = this.logger.isLevelEnabled('info');
    this.warnOn = this.logger.isLevelEnabled('warn');
    this.errorOn = this.logger.isLevelEnabled('error');
  }

  /** Writes the line of a finished request (or skips it: level, sampling). */
  write(
    req: ObservedRequest,
    rec: RequestRecord,
    durationMs: number,
    queueWaitMs: number,
    tokens: number,
  ): void {
    const status = req.status;
    // A request with an error code failed even when its status says otherwise: a stream cut after
    // its 200 head went out (the node dropped, a timeout, a drain) is an `error` line like a 5xx.
    const level =
      status >= 500 ? 'error' : status >= 400 ? 'warn' : rec.errorCode !== null ? 'error' : 'info';
    if (level === 'info') {
      if (!this.infoOn) return;
      if (this.sampleRate < 1 && Math.random() >= this.sampleRate) {
        this.sampledOut++;
        return;
      }
    } else if (level === 'warn' ? !this.warnOn : !this.errorOn) return;
    this.written++;
    const route = req.route;
    this.logger[level]({
      msg: 'request',
      request_id: req.id,
      method: req.method,
      path: req.path,
      tenant: req.tenant === '' ? null : req.tenant,
      route: route === null ? null : route.name,
      pool: req.pool === null ? null : req.pool.name,
      node: rec.node === null ? null : rec.node.id,
      model: modelOf(req.body),
      status,
      bytes: rec.bytes,
      ttft_ms: rec.ttftMs < 0 ? null : round(rec.ttftMs),
      duration_ms: round(durationMs),
      queue_ms: queueWaitMs < 0 ? null : round(queueWaitMs),
      batch_size: rec.batchSize < 0 ? null : rec.batchSize,
      attempts: req.attempts,
      tokens: tokens < 0 ? null : tokens,
      refusal: rec.refusalReason,
      error: rec.errorCode,
      trace_id: rec.trace === null ? null : rec.trace.traceId,
    });
  }

  /** Writes the line of a request refused before it became a session (framing, size). */
  writeRefused(status: number, reason: string): void {
    const level = status >= 500 ? 'error' : 'warn';
    if (level === 'warn' ? !this.warnOn : !this.errorOn) return;
    this.written++;
    this.logger[level]({ msg: 'request', status, refusal: reason });
  }

  /** Writes lines a worker thread's relayed log sent (whole lines, each ending in a newline). */
  writeLines(text: string): void {
    this.dest?.write(text);
  }

  /** Flushes what is buffered and closes the destination. */
  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.logger.flush(() => resolve());
    });
    const dest = this.dest;
    if (!this.ownsFile || dest === null) return;
    await new Promise<void>((resolve) => {
      dest.once('close', () => resolve());
      dest.once('error', () => resolve());
      dest.end();
    });
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
