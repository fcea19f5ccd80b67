/**
 * Sends finished spans to an OpenTelemetry collector over OTLP/HTTP with the JSON encoding
 * (`POST <endpoint>`, `application/json`, ExportTraceServiceRequest). Spans wait in a bounded queue
 * and leave in batches on a timer or when a batch is full; when the collector is slow or down the
 * queue drops the newest spans and counts them, so tracing never holds memory or the event loop.
 */
import { httpFetch } from '../runtime/optional-modules.js';
import { unixNanos } from './trace-context.js';

/** A finished span, in monotonic ms. */
export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  startMs: number;
  endMs: number;
  attributes: [string, string | number][];
  /** Status ERROR when true, else UNSET. */
  error: boolean;
}

/** Exporter settings (`tracing` in the config). */
export interface OtlpExporterOptions {
  /** Collector URL, e.g. `http://otel-collector:4318/v1/traces`. */
  endpoint: string;
  /** `service.name` of the resource. */
  serviceName: string;
  /** Most spans waiting; more are dropped. */
  maxQueueSpans: number;
  /** Most spans per request to the collector. */
  maxBatchSpans: number;
  /** How often waiting spans are sent, ms. */
  flushIntervalMs: number;
  /** Time allowed for one export request, ms. */
  timeoutMs: number;
  /** Service version reported in the resource. */
  version: string;
}

/** Counters of the exporter, for `/metrics`. */
export interface OtlpExporterStats {
  exported: number;
  dropped: number;
  failedRequests: number;
}

export class OtlpExporter {
  readonly stats: OtlpExporterStats = { exported: 0, dropped: 0, failedRequests: 0 };
  private readonly options: OtlpExporterOptions;
  private queue: OtlpSpan[] = [];
  private timer: NodeJS.Timeout | null = null;
  private sending: Promise<void> | null = null;
  private closed = false;

  constructor(options: OtlpExporterOptions) {
    this.options = options;
    this.timer = setInterval(() => void this.flush(), options.flushIntervalMs);
    this.timer.unref();
  }

  /** Queues the spans of one request (dropped, and counted, when the queue is full). */
  enqueue(spans: OtlpSpan[]): void {
    if (this.closed) return;
    const room = this.options.maxQueueSpans - this.queue.length;
    if (room < spans.length) {
      this.stats.dropped += spans.length - Math.max(room, 0);
      if (room <= 0) return;
      spans = spans.slice(0, room);
    }
    for (const s of spans) this.queue.push(s);
    if (this.queue.length >= this.options.maxBatchSpans && this.sending === null) void this.flush();
  }

  /** Sends what is queued, one batch after another; resolves when the queue is empty or a send failed. */
  async flush(): Promise<void> {
    if (this.sending !== null) return this.sending;
    this.sending = this.drain().finally(() => {
      this.sending = null;
    });
    return this.sending;
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatchSpans);
      const ok = await this.send(batch);
      if (!ok) {
        this.stats.dropped += batch.length;
        return;
      }
      this.stats.exported += batch.length;
    }
  }

  private async send(batch: OtlpSpan[]): Promise<boolean> {
    try {
      const res = await httpFetch(this.options.endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(this.payload(batch)),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      await res.arrayBuffer();
      if (res.status >= 200 && res.status < 300) return true;
    } catch {
      // Counted below; the collector being away must not disturb requests.
    }
    this.stats.failedRequests++;
    return false;
  }

  /** The ExportTraceServiceRequest for `batch` (OTLP/JSON: hex ids, nanosecond strings). */
  payload(batch: readonly OtlpSpan[]): unknown {
    return {
      resourceSpans: [
        {
          resource: {
            attributes: [
              { key: 'service.name', value: { stringValue: this.options.serviceName } },
              { key: 'service.version', value: { stringValue: this.options.version } },
            ],
          },
          scopeSpans: [
            {
              scope: { name: 'sluice', version: this.options.version },
              spans: batch.map((s) => ({
                traceId: s.traceId,
                spanId: s.spanId,
                ...(s.parentSpanId === null ? {} : { parentSpanId: s.parentSpanId }),
                name: s.name,
                kind: s.kind,
                startTimeUnixNano: unixNanos(s.startMs),
                endTimeUnixNano: unixNanos(s.endMs),
                attributes: s.attributes.map(([key, v]) => ({
                  key,
                  value: typeof v === 'number' ? numberValue(v) : { stringValue: v },
                })),
                status: { code: s.error ? 2 : 0 },
              })),
            },
          ],
        },
      ],
    };
  }

  /** Stops the timer and sends what is left (bounded by the request timeout). */
  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.flush();
    this.closed = true;
  }
}

function numberValue(v: number): { intValue: string } | { doubleValue: number } {
  return Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v };
}
