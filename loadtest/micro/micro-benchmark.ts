/**
 * The shape of a micro-benchmark of one hot function (route match, a balancing pick, a limiter
 * take, an HDR record, head capture). Files named `*.bench.ts` under `loadtest/micro/` export
 * `benchmarks: MicroBenchmark[]`; `npm run micro` (micro-main.ts) finds them, times the operation
 * call by call after a warm-up, and reports per-call percentiles and heap allocation per call.
 */

export interface MicroBenchmark {
  /** Name in the report, `area: what` (`balance: least-response-time pick, 16 nodes`). */
  readonly name: string;
  /**
   * Builds the state under test once and returns the operation to time. The operation is called
   * many times; it must leave the state ready for the next call (e.g. release what it acquired).
   */
  setup(): () => unknown;
  /** Upper bound the code under test promises for one call at p99, ns; checked by the runner. */
  readonly p99LimitNs?: number;
  /** True when the code under test promises not to allocate; the runner checks the heap. */
  readonly allocationFree?: boolean;
}
