/**
 * Tracing of requests, W3C Trace Context (`traceparent`, `tracestate`) in and out: a request that
 * arrives with exactly one valid sampled `traceparent` continues that trace (its `tracestate` goes
 * on with it); one with a valid unsampled `traceparent` is forwarded untouched; any other (none, an
 * invalid one, or more than one) starts a new trace (sampled at `sample_ratio`), and the client's
 * `traceparent` and `tracestate` headers are then dropped from what is forwarded (a `tracestate`
 * without a valid `traceparent` must be discarded). Each attempt sent to a node carries exactly one
 * `traceparent`, naming the attempt's own span. Finished requests become one server span with
 * children for the admission wait, the batch window and every attempt, handed to the OTLP
 * exporter. Exists only when `tracing` is configured: with tracing off nothing here runs and both
 * headers are forwarded untouched.
 */
import { randomFillSync } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { ObservedRequest, RequestRecord } from './request-record.js';
import type { OtlpExporter, OtlpSpan } from './otlp-exporter.js';

/** `00-<trace id>-<parent span id>-<flags>` (W3C Trace Context §3.2). */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** OTLP span kinds. */
const KIND_INTERNAL = 1;
const KIND_SERVER = 2;
const KIND_CLIENT = 3;

/** One attempt's span, kept until the request ends. */
interface AttemptSpan {
  spanId: string;
  startMs: number;
  endMs: number;
  node: string;
  number: number;
  hedge: boolean;
  outcome: string;
}

/** What the tracer needs of an attempt (the lifecycle's Attempt implements it). */
export interface TracedAttempt {
  readonly node: { readonly id: string };
  readonly number: number;
  readonly hedge: boolean;
  readonly startMs: number;
  readonly headMs: number;
  readonly cancelled: boolean;
  readonly discard: boolean;
  /** The attempt's span id, set by the tracer. */
  traceSpanId: string | null;
}

/** The trace of one sampled request. */
export class RequestTrace {
  readonly traceId: string;
  /** Span id of the request (server) span. */
  readonly spanId: string;
  /** The caller's span, or null when the trace starts here. */
  readonly parentSpanId: string | null;
  readonly startMs: number;
  readonly attempts: AttemptSpan[] = [];
  /** Micro-batch window, monotonic ms; -1 when not batched. */
  batchStartMs = -1;
  batchEndMs = -1;

  constructor(traceId: string, spanId: string, parentSpanId: string | null, startMs: number) {
    this.traceId = traceId;
    this.spanId = spanId;
    this.parentSpanId = parentSpanId;
    this.startMs = startMs;
  }
}

/** Parsed `traceparent`, or null when absent or invalid (then a new trace starts). */
export function parseTraceparent(
  value: string | undefined,
): { traceId: string; parentId: string; sampled: boolean } | null {
  if (value === undefined) return null;
  const m = TRACEPARENT.exec(value.trim().toLowerCase());
  if (m === null) return null;
  const version = m[1]!;
  // Version ff is invalid; version 00 has no trailing fields (§3.2.2.1, §3.2.4).
  if (version === 'ff' || (version === '00' && value.trim().length !== 55)) return null;
  const traceId = m[2]!;
  const parentId = m[3]!;
  if (traceId === ZERO_TRACE || parentId === ZERO_SPAN) return null;
  return { traceId, parentId, sampled: (parseInt(m[4]!, 16) & 1) === 1 };
}

const idPool = Buffer.alloc(4096);
let idOffset = idPool.length;

/** `bytes` random bytes as lower-case hex. */
function randomHex(bytes: number): string {
  if (idOffset + bytes > idPool.length) {
    randomFillSync(idPool);
    idOffset = 0;
  }
  const s = idPool.toString('hex', idOffset, idOffset + bytes);
  idOffset += bytes;
  return s;
}

/** Monotonic ms to Unix nanoseconds, as the decimal string OTLP/JSON takes. */
export function unixNanos(monoMs: number): string {
  const us = Math.round((performance.timeOrigin + monoMs) * 1000);
  return `${us}000`;
}

/** Tracing settings (`tracing` in the config). */
export interface TracerOptions {
  /** Share of requests without an incoming sampled trace that start one, 0..1. */
  sampleRatio: number;
}

export class Tracer {
  private readonly exporter: OtlpExporter;
  private readonly sampleRatio: number;
  /** Traces started and continued (for tests and metrics). */
  started = 0;

  constructor(exporter: OtlpExporter, options: TracerOptions) {
    this.exporter = exporter;
    this.sampleRatio = options.sampleRatio;
  }

  /**
   * A request arrived with `headers` (its forwarded headers, flat `[name, value, ...]`, lower-case
   * names): its trace, or null when it is not sampled (then nothing is recorded). A trace context
   * the request does not continue (no `traceparent`, an invalid one, or two or more: W3C treats
   * several as invalid) is removed from `headers` in place, so that neither the client's
   * `traceparent` nor its `tracestate` reaches a node beside a trace Sluice started.
   */
  begin(headers: string[], startMs: number): RequestTrace | null {
    let traceparent: string | undefined;
    let parents = 0;
    let states = 0;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i];
      if (name === 'traceparent') {
        if (parents++ === 0) traceparent = headers[i + 1];
      } else if (name === 'tracestate') states++;
    }
    const parent = parents === 1 ? parseTraceparent(traceparent) : null;
    if (parent !== null) {
      // Unsampled: forwarded untouched, tracestate included; sampled: continued, with its tracestate.
      if (!parent.sampled) return null;
      this.started++;
      return new RequestTrace(parent.traceId, randomHex(8), parent.parentId, startMs);
    }
    if (parents > 0) removeHeader(headers, 'traceparent');
    if (states > 0) removeHeader(headers, 'tracestate');
    if (this.sampleRatio < 1 && Math.random() >= this.sampleRatio) return null;
    this.started++;
    return new RequestTrace(randomHex(16), randomHex(8), null, startMs);
  }

  /**
   * An attempt is about to be sent: gives it a span and sets its `traceparent` in `headers`, the
   * only one (another, added after the request arrived by a plugin or a pool's request_headers, is
   * removed).
   */
  attemptStart(trace: RequestTrace, att: TracedAttempt, headers: string[]): void {
    const spanId = randomHex(8);
    att.traceSpanId = spanId;
    const value = `00-${trace.traceId}-${spanId}-01`;
    for (let i = 0; i < headers.length; i += 2) {
      if (headers[i] === 'traceparent') {
        headers[i + 1] = value;
        removeHeader(headers, 'traceparent', i + 2);
        return;
      }
    }
    headers.push('traceparent', value);
  }

  /** An attempt is over (answered, failed, cancelled or drained). */
  attemptEnd(trace: RequestTrace, att: TracedAttempt, nowMs: number): void {
    if (att.traceSpanId === null) return;
    trace.attempts.push({
      spanId: att.traceSpanId,
      startMs: att.startMs,
      endMs: nowMs,
      node: att.node.id,
      number: att.number,
      hedge: att.hedge,
      outcome: att.cancelled
        ? 'cancelled'
        : att.discard
          ? 'retryable_status'
          : att.headMs < 0
            ? 'failed'
            : 'answered',
    });
  }

  /** The request is over: its spans go to the exporter. */
  end(
    trace: RequestTrace,
    req: ObservedRequest,
    rec: RequestRecord,
    nowMs: number,
    queueStartMs: number,
    queueWaitMs: number,
  ): void {
    const spans: OtlpSpan[] = [];
    const route = req.route === null ? 'unrouted' : req.route.name;
    const attrs: [string, string | number][] = [
      ['http.request.method', req.method],
      ['url.path', req.path],
      ['http.response.status_code', req.status],
      ['sluice.request_id', req.id],
      ['sluice.route', route],
      ['sluice.attempts', req.attempts],
    ];
    if (req.pool !== null) attrs.push(['sluice.pool', req.pool.name]);
    if (req.tenant !== '') attrs.push(['sluice.tenant', req.tenant]);
    if (rec.node !== null) attrs.push(['sluice.node', rec.node.id]);
    if (rec.ttftMs >= 0) attrs.push(['sluice.ttft_ms', rec.ttftMs]);
    const reason = rec.refusalReason ?? rec.errorCode;
    if (reason !== null) attrs.push(['sluice.error', reason]);
    spans.push({
      traceId: trace.traceId,
      spanId: trace.spanId,
      parentSpanId: trace.parentSpanId,
      name: `${req.method} ${route}`,
      kind: KIND_SERVER,
      startMs: trace.startMs,
      endMs: nowMs,
      attributes: attrs,
      error: req.status >= 500,
    });
    if (queueWaitMs >= 0 && queueStartMs >= 0) {
      spans.push(
        child(
          trace,
          randomHex(8),
          'admission',
          KIND_INTERNAL,
          queueStartMs,
          queueStartMs + queueWaitMs,
          [],
          false,
        ),
      );
    }
    if (trace.batchStartMs >= 0) {
      spans.push(
        child(
          trace,
          randomHex(8),
          'batch window',
          KIND_INTERNAL,
          trace.batchStartMs,
          trace.batchEndMs,
          [['sluice.batch_size', rec.batchSize]],
          false,
        ),
      );
    }
    for (const a of trace.attempts) {
      spans.push(
        child(
          trace,
          a.spanId,
          `attempt ${a.number}`,
          KIND_CLIENT,
          a.startMs,
          a.endMs,
          [
            ['sluice.node', a.node],
            ['sluice.attempt', a.number],
            ['sluice.hedge', a.hedge ? 1 : 0],
            ['sluice.outcome', a.outcome],
          ],
          a.outcome === 'failed' || a.outcome === 'retryable_status',
        ),
      );
    }
    this.exporter.enqueue(spans);
  }
}

/** Removes every `name` entry of the flat header list `headers` from index `from` on, in place. */
function removeHeader(headers: string[], name: string, from = 0): void {
  let w = from;
  for (let r = from; r < headers.length; r += 2) {
    if (headers[r] === name) continue;
    if (w !== r) {
      headers[w] = headers[r]!;
      headers[w + 1] = headers[r + 1]!;
    }
    w += 2;
  }
  headers.length = w;
}

function child(
  trace: RequestTrace,
  spanId: string,
  name: string,
  kind: number,
  startMs: number,
  endMs: number,
  attributes: [string, string | number][],
  error: boolean,
): OtlpSpan {
  return {
    traceId: trace.traceId,
    spanId,
    parentSpanId: trace.spanId,
    name,
    kind,
    startMs,
    endMs,
    attributes,
    error,
  };
}

export { KIND_CLIENT, KIND_INTERNAL, KIND_SERVER };
