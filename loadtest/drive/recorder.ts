/**
 * Collects what happened to every request of a measured phase: latency histograms (end to end,
 * time to first token, inter-token gaps, generator send lag), status and error counts, per-tenant
 * and per-kind breakdowns and a per-second timeline by intended send time. Latencies are recorded for
 * successful (2xx, complete) responses only; failures are counted by category.
 */

import type { Histogram } from 'hdr-histogram-js';
import type { Outcome, StreamObserver } from '../client/http-sender.js';
import type { PlannedRequest, RequestKind } from '../workload/planned-request.js';
import { createLatencyHistogram, percentileMs, recordMs } from './latency-histogram.js';

/** Counters and latencies of one group of requests (a tenant, a kind). */
export interface GroupStats {
  /** Requests planned in this group (sent, or refused by the client's in-flight cap). */
  requests: number;
  ok: number;
  errors: number;
  e2e: Histogram;
  ttft: Histogram;
}

/** One second of the phase, by intended send time. */
export interface TimelineBucket {
  requests: number;
  ok: number;
  errors: number;
  e2e: Histogram;
}

/** Connection refusals with no success before the run is declared unreachable. */
const REFUSED_LIMIT = 10;

function newGroup(): GroupStats {
  return {
    requests: 0,
    ok: 0,
    errors: 0,
    e2e: createLatencyHistogram(true),
    ttft: createLatencyHistogram(true),
  };
}

/** Records one phase. `phaseStart` is the `performance.now()` the phase's intended times count from. */
export class Recorder implements StreamObserver {
  readonly e2e = createLatencyHistogram();
  readonly ttft = createLatencyHistogram();
  readonly itl = createLatencyHistogram();
  /** Actual send time minus intended send time (open loop): the generator's own lateness. */
  readonly sendLag = createLatencyHistogram();
  /** Intended send to the answer of requests answered with an error status (>= 400, e.g. a fast 503). */
  readonly errorE2e = createLatencyHistogram();
  /** Responses by HTTP status code. */
  readonly statuses = new Map<number, number>();
  /** Failures by category (see `Outcome.error`, plus `client_overflow`). */
  readonly errors = new Map<string, number>();
  readonly tenants: GroupStats[];
  readonly kinds = new Map<RequestKind, GroupStats>();
  readonly timeline: TimelineBucket[] = [];
  /** Requests planned (including those refused by the in-flight cap). */
  requests = 0;
  /** Requests that ended (any way). */
  completed = 0;
  ok = 0;
  /** Successes that completed before sending stopped (the throughput's numerator). */
  okWhileSending = 0;
  failed = 0;
  /** When sending stopped (`performance.now()` ms), null while it goes on; set by the phase. */
  sendingEndedAt: number | null = null;
  /** Most requests in flight at once. */
  peakInFlight = 0;
  /**
   * Output tokens received in streams while sending went on (the streamed tokens/s numerator), as
   * they arrive: tokens of the drain are left out, like `okWhileSending`'s drain completions.
   */
  streamTokens = 0;
  private interval = createLatencyHistogram(true);
  private intervalOk = 0;

  constructor(
    tenantCount: number,
    readonly phaseStart: number,
  ) {
    this.tenants = Array.from({ length: tenantCount }, newGroup);
  }

  /** Notes that `req`, due at `intendedAt`, went out now with `inFlight` requests outstanding. */
  noteSent(intendedAt: number, sentAt: number, inFlight: number): void {
    recordMs(this.sendLag, Math.max(0, sentAt - intendedAt));
    if (inFlight > this.peakInFlight) this.peakInFlight = inFlight;
  }

  /** Records how `req` ended; latency counts from `intendedAt`. */
  record(req: PlannedRequest, intendedAt: number, outcome: Outcome): void {
    const tenant = this.tenants[req.tenant];
    const kind = this.kindGroup(req.kind);
    const bucket = this.bucket(intendedAt);
    this.requests++;
    this.completed++;
    for (const g of [tenant, kind, bucket]) if (g !== undefined) g.requests++;
    if (outcome.status !== 0) this.statuses.set(outcome.status, (this.statuses.get(outcome.status) ?? 0) + 1);
    if (outcome.error !== null) {
      // A 200 stream cut by the drain or broken midway is a failure, but not an error answer.
      if (outcome.status >= 400) recordMs(this.errorE2e, outcome.endAt - intendedAt);
      this.fail(outcome.error, tenant, kind, bucket);
      return;
    }
    const e2eMs = outcome.endAt - intendedAt;
    this.ok++;
    if (this.sendingEndedAt === null || outcome.endAt <= this.sendingEndedAt) this.okWhileSending++;
    this.intervalOk++;
    recordMs(this.e2e, e2eMs);
    recordMs(this.interval, e2eMs);
    recordMs(bucket.e2e, e2eMs);
    for (const g of [tenant, kind]) {
      if (g === undefined) continue;
      g.ok++;
      recordMs(g.e2e, e2eMs);
    }
    bucket.ok++;
    for (const gap of outcome.gaps) recordMs(this.itl, gap);
    if (outcome.firstTokenAt !== null) {
      const ttftMs = outcome.firstTokenAt - intendedAt;
      recordMs(this.ttft, ttftMs);
      if (tenant !== undefined) recordMs(tenant.ttft, ttftMs);
      recordMs(kind.ttft, ttftMs);
    }
  }

  /** Records a request that was never sent (e.g. `client_overflow`). */
  recordUnsent(req: PlannedRequest, intendedAt: number, category: string): void {
    const tenant = this.tenants[req.tenant];
    const kind = this.kindGroup(req.kind);
    const bucket = this.bucket(intendedAt);
    this.requests++;
    for (const g of [tenant, kind, bucket]) if (g !== undefined) g.requests++;
    this.fail(category, tenant, kind, bucket);
  }

  /** Records a failure that cannot be tied to a planned request (autocannon loses the request on a socket error). */
  recordLost(category: string): void {
    this.requests++;
    this.completed++;
    this.fail(category);
  }

  /** Counts a stream's token that arrived at `at` (`performance.now()` ms) if sending was still going on. */
  noteToken(at: number): void {
    if (this.sendingEndedAt === null || at <= this.sendingEndedAt) this.streamTokens++;
  }

  /** True once connections were refused repeatedly and nothing succeeded: the target is not there. */
  targetRefused(): boolean {
    return this.ok === 0 && (this.errors.get('ECONNREFUSED') ?? 0) >= REFUSED_LIMIT;
  }

  /** Successes and their p50/p99 (ms) since the previous call, for the progress line. */
  takeInterval(): { ok: number; p50: number | null; p99: number | null } {
    const out = {
      ok: this.intervalOk,
      p50: percentileMs(this.interval, 50),
      p99: percentileMs(this.interval, 99),
    };
    this.interval.reset();
    this.intervalOk = 0;
    return out;
  }

  private fail(category: string, ...groups: ({ errors: number } | undefined)[]): void {
    this.failed++;
    this.errors.set(category, (this.errors.get(category) ?? 0) + 1);
    for (const g of groups) if (g !== undefined) g.errors++;
  }

  private kindGroup(kind: RequestKind): GroupStats {
    let g = this.kinds.get(kind);
    if (g === undefined) {
      g = newGroup();
      this.kinds.set(kind, g);
    }
    return g;
  }

  private bucket(intendedAt: number): TimelineBucket {
    const second = Math.max(0, Math.floor((intendedAt - this.phaseStart) / 1000));
    while (this.timeline.length <= second) {
      this.timeline.push({ requests: 0, ok: 0, errors: 0, e2e: createLatencyHistogram(true) });
    }
    return this.timeline[second] as TimelineBucket;
  }
}
