/**
 * What one request leaves behind in the metrics layer: its histogram samples in the series the plan
 * resolved for its route × pool × node and its tenant, its refusal counter, its access-log line and
 * its trace. The session calls one method per event; everything else happens here. Fixed shape,
 * one per request; nothing is allocated per sample.
 */
import { nowMs } from '../lifecycle/clock.js';
import type { Pool } from '../pool/pool.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { MetricSeries } from './metric-series.js';
import { REFUSALS, type Refusal } from './refusals.js';
import type { RouteSeries } from './route-series.js';
import { Metric } from './series-metrics.js';
import type { StatsRegistry } from './stats.js';
import type { RequestTrace, TracedAttempt } from './trace-context.js';
import type { WindowedHistogram } from './windowed-histogram.js';

/** The parts of a session the record reads (the Session implements it). */
export interface ObservedRequest {
  readonly id: string;
  readonly method: string;
  readonly path: string;
  /** Arrival, monotonic ms. */
  readonly startMs: number;
  readonly status: number;
  readonly attempts: number;
  readonly tenant: string;
  readonly tenantInfo: { readonly index: number } | null;
  readonly route: { readonly name: string; readonly series: RouteSeries | null } | null;
  readonly pool: Pool | null;
  readonly plan: { readonly tenantSeries: readonly MetricSeries[] };
  readonly body: Buffer | null;
  /**
   * Forwarded request headers, flat `[name, value, ...]`, lower-case names. With tracing on, the
   * tracer removes a client trace context it does not continue (`Tracer.begin`).
   */
  readonly headers: string[];
  header(name: string): string | undefined;
}

/** An admission queue's view of one request (the lifecycle's AdmissionGate implements it). */
export interface QueueTiming {
  /** When the request was offered to admission, monotonic ms. */
  readonly offeredAtMs: number;
  /** Time spent waiting for a slot up to `nowMs` (or until admitted), ms. */
  waitedMs(nowMs: number): number;
}

export class RequestRecord {
  readonly stats: StatsRegistry;
  /** The node whose answer went to the client once its head arrived; before that, the node asked last. */
  node: UpstreamNode | null = null;
  /** Series of the route × pool × node that answered (null until the head). */
  series: MetricSeries | null = null;
  /** Series of the tenant (null without tenants, or before authentication). */
  tenant: MetricSeries | null = null;
  /** Streams: inter-token gap histograms, set at the first token. */
  private gaps: WindowedHistogram | null = null;
  private tenantGaps: WindowedHistogram | null = null;
  /** Streams: when the last chunk was forwarded, monotonic ms. */
  private lastChunkMs = 0;
  /** Streams: time to first token, ms; -1 when none. */
  ttftMs = -1;
  /** Body bytes sent to the client: forwarded from a node, or of Sluice's own reply. */
  bytes = 0;
  /** Micro-batching: window wait (ms) and batch size; -1 when not batched. */
  batchWaitMs = -1;
  batchSize = -1;
  /** Why Sluice refused the request (`Refusal`), -1 when it did not. */
  refusal = -1;
  /** Code of the error Sluice answered with (refusal or upstream failure), or null. */
  errorCode: string | null = null;
  /** The request's trace, when tracing is on. */
  readonly trace: RequestTrace | null;

  constructor(stats: StatsRegistry, req: ObservedRequest) {
    this.stats = stats;
    const tracer = stats.tracer;
    this.trace = tracer === null ? null : tracer.begin(req.headers, req.startMs);
  }

  private tenantSeries(req: ObservedRequest): MetricSeries | null {
    if (this.tenant === null && req.tenantInfo !== null)
      this.tenant = req.plan.tenantSeries[req.tenantInfo.index] ?? null;
    return this.tenant;
  }

  /** The answering attempt's head arrived `ttfbMs` after its dispatch. */
  onHead(req: ObservedRequest, node: UpstreamNode, ttfbMs: number): void {
    // HOT
    this.node = node;
    const rs = req.route!.series;
    const s = rs === null ? null : rs.forNode(node, req.pool!);
    this.series = s;
    s?.recordMs(Metric.ttfb, ttfbMs);
    this.tenantSeries(req)?.recordMs(Metric.ttfb, ttfbMs);
  }

  /** The first event of a stream went out at `nowMs`. */
  onFirstToken(req: ObservedRequest, nowMs: number): void {
    // HOT
    const ttft = nowMs - req.startMs;
    this.ttftMs = ttft;
    this.lastChunkMs = nowMs;
    const s = this.series;
    if (s !== null) {
      s.recordMs(Metric.ttft, ttft);
      this.gaps = s.histogram(Metric.itl);
    }
    const t = this.tenantSeries(req);
    if (t !== null) {
      t.recordMs(Metric.ttft, ttft);
      this.tenantGaps = t.histogram(Metric.itl);
    }
  }

  /** A later chunk of a stream went out at `nowMs`: one inter-token gap. */
  onChunk(nowMs: number): void {
    // HOT
    const gapUs = (nowMs - this.lastChunkMs) * 1000;
    this.lastChunkMs = nowMs;
    this.gaps?.record(gapUs);
    this.tenantGaps?.record(gapUs);
  }

  /** The micro-batcher sent the request's item (queued at `submittedMs`) at `sentMs`, in a batch of `size`. */
  onBatchWindow(submittedMs: number, sentMs: number, size: number): void {
    this.batchWaitMs = sentMs - submittedMs;
    this.batchSize = size;
    const t = this.trace;
    if (t !== null) {
      t.batchStartMs = submittedMs;
      t.batchEndMs = sentMs;
    }
  }

  /** Tracing on: an attempt is about to be dispatched with `headers`. */
  onAttemptStart(att: TracedAttempt, headers: string[]): void {
    if (this.trace !== null) this.stats.tracer?.attemptStart(this.trace, att, headers);
  }

  /** Tracing on: an attempt is over. */
  onAttemptEnd(att: TracedAttempt): void {
    if (this.trace !== null) this.stats.tracer?.attemptEnd(this.trace, att, nowMs());
  }

  /** Sluice refused the request (before any node answered); `code` is the error id (legacy counter). */
  onRefused(req: ObservedRequest, refusal: Refusal, code: string): void {
    this.stats.countRejected(code);
    this.refusal = refusal;
    this.stats.refused[refusal]!++;
    const t = this.tenantSeries(req);
    if (t !== null) t.refused[refusal]!++;
  }

  /**
   * The request is over. `queue`: its admission gate (null: no admission control); `tokens`:
   * usage the node reported (-1: none).
   */
  onDone(req: ObservedRequest, nowMs: number, queue: QueueTiming | null, tokens: number): void {
    // HOT
    const queueWaitMs = queue === null ? -1 : queue.waitedMs(nowMs);
    const durationMs = nowMs - req.startMs;
    let s = this.series;
    if (s === null && req.route !== null && req.pool !== null)
      s = req.route.series?.forPool(req.pool) ?? null;
    const t = this.tenantSeries(req);
    if (s !== null) record(s, durationMs, queueWaitMs, tokens, this);
    if (t !== null) record(t, durationMs, queueWaitMs, tokens, this);
    const log = this.stats.accessLog;
    if (log !== null) log.write(req, this, durationMs, queueWaitMs, tokens);
    if (this.trace !== null)
      this.stats.tracer?.end(
        this.trace,
        req,
        this,
        nowMs,
        queue === null ? -1 : queue.offeredAtMs,
        queueWaitMs,
      );
  }

  /** The refusal reason label, or null. */
  get refusalReason(): string | null {
    return this.refusal < 0 ? null : REFUSALS[this.refusal]!.reason;
  }
}

function record(
  s: MetricSeries,
  durationMs: number,
  queueWaitMs: number,
  tokens: number,
  r: RequestRecord,
): void {
  // HOT
  s.recordMs(Metric.duration, durationMs);
  if (queueWaitMs >= 0) s.recordMs(Metric.queueWait, queueWaitMs);
  if (r.batchWaitMs >= 0) {
    s.recordMs(Metric.batchWait, r.batchWaitMs);
    s.recordCount(Metric.batchSize, r.batchSize);
  }
  if (tokens >= 0) s.recordCount(Metric.tokens, tokens);
}
