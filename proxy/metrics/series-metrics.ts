/**
 * The quantities Sluice records per route × pool × node and per tenant, with their units, their
 * Prometheus names and the histogram buckets chosen for LLM traffic (milliseconds to minutes for
 * latencies). One table, read by the recorder, the exporter, the admin stats and the docs test.
 */
import { COUNT, LATENCY_US, type HdrScale } from './hdr.js';

/** Index of each quantity in a series (fixed: the request path indexes with these constants). */
export const Metric = {
  /** Request arrival to the last response byte (or the local reply). */
  duration: 0,
  /** Dispatch of the winning attempt to the upstream response head. */
  ttfb: 1,
  /** Streams: request arrival to the first SSE event forwarded. */
  ttft: 2,
  /** Streams: gap between consecutive body chunks forwarded after the first event. */
  itl: 3,
  /** Time queued in the pool's admission control. */
  queueWait: 4,
  /** Time an item waited in a micro-batch window before its batch was sent. */
  batchWait: 5,
  /** Items in the micro-batch that carried the request. */
  batchSize: 6,
  /** Tokens the node reported in `usage` (total). */
  tokens: 7,
} as const;
export type Metric = (typeof Metric)[keyof typeof Metric];
export const METRIC_COUNT = 8;

/** Seconds: latencies of whole requests, from a few milliseconds to ten minutes. */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
/** Seconds: gaps between tokens of a stream. */
const GAP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5];
/** Seconds: waits inside Sluice (admission queue, batch window). */
const WAIT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];
const TOKEN_BUCKETS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];

/** One recorded quantity. */
export interface MetricDef {
  readonly id: Metric;
  /** Key in `/admin/stats` and `/admin/histograms?metric=`. */
  readonly key: string;
  /** Name suffix after `sluice_route_` / `sluice_tenant_`, with its unit. */
  readonly suffix: string;
  readonly help: string;
  readonly scale: HdrScale;
  /** Bucket upper bounds in the base unit. */
  readonly buckets: readonly number[];
  /** Unit of the values in `/admin/stats`: `seconds`, `tokens`, `items`. */
  readonly unit: string;
}

export const METRICS: readonly MetricDef[] = [
  {
    id: Metric.duration,
    key: 'duration',
    suffix: 'request_duration_seconds',
    help: 'Time from request arrival to the last response byte.',
    scale: LATENCY_US,
    buckets: REQUEST_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.ttfb,
    key: 'ttfb',
    suffix: 'upstream_ttfb_seconds',
    help: 'Time from dispatch of the answering attempt to the upstream response head.',
    scale: LATENCY_US,
    buckets: REQUEST_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.ttft,
    key: 'ttft',
    suffix: 'time_to_first_token_seconds',
    help: 'Streams: time from request arrival to the first event forwarded to the client.',
    scale: LATENCY_US,
    buckets: REQUEST_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.itl,
    key: 'itl',
    suffix: 'inter_token_gap_seconds',
    help: 'Streams: gap between consecutive chunks forwarded after the first event.',
    scale: LATENCY_US,
    buckets: GAP_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.queueWait,
    key: 'queue_wait',
    suffix: 'admission_wait_seconds',
    help: "Time queued in the pool's admission control (0 when admitted at once).",
    scale: LATENCY_US,
    buckets: WAIT_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.batchWait,
    key: 'batch_wait',
    suffix: 'batch_wait_seconds',
    help: 'Time waited in a micro-batch window before the batch was sent.',
    scale: LATENCY_US,
    buckets: WAIT_BUCKETS,
    unit: 'seconds',
  },
  {
    id: Metric.batchSize,
    key: 'batch_size',
    suffix: 'batch_size_items',
    help: 'Items in the micro-batch that carried the request.',
    scale: COUNT,
    buckets: SIZE_BUCKETS,
    unit: 'items',
  },
  {
    id: Metric.tokens,
    key: 'tokens',
    suffix: 'tokens',
    help: 'Tokens used by the request, as the node reported them in usage (prompt + completion).',
    scale: COUNT,
    buckets: TOKEN_BUCKETS,
    unit: 'tokens',
  },
];

/** The definition for `/admin/histograms?metric=KEY`, or undefined. */
export function metricByKey(key: string): MetricDef | undefined {
  return METRICS.find((m) => m.key === key);
}
