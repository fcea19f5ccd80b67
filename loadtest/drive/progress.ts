/**
 * The progress line printed once a second while a phase runs (to stderr by the CLI): elapsed time,
 * requests, successes, errors, requests in flight, and the last second's throughput and p50/p99.
 */

import { fmtInt, fmtMs } from '../report/text-table.js';
import type { Recorder } from './recorder.js';

/**
 * Starts printing progress for `recorder` through `write`; returns the function that stops it.
 * `inFlight` reads the requests outstanding now, or null when the driver cannot tell.
 */
export function startProgress(
  label: string,
  recorder: Recorder,
  durationMs: number,
  inFlight: () => number | null,
  write: (line: string) => void,
): () => void {
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    const interval = recorder.takeInterval();
    const perS = (interval.ok * 1000) / Math.max(1, now - last);
    last = now;
    const elapsed = now - recorder.phaseStart;
    const clock =
      elapsed < durationMs
        ? `${(elapsed / 1000).toFixed(0).padStart(4)}/${(durationMs / 1000).toFixed(0)} s`
        : `draining +${((elapsed - durationMs) / 1000).toFixed(0)} s`;
    const active = inFlight();
    write(
      `[${label}] ${clock}  ` +
        `requests ${fmtInt(recorder.requests)}  ok ${fmtInt(recorder.ok)}  errors ${fmtInt(recorder.failed)}  ` +
        (active === null ? '' : `in flight ${fmtInt(active)}  `) +
        `last second: ${perS.toFixed(0)} ok/s, p50 ${fmtMs(interval.p50)} ms, p99 ${fmtMs(interval.p99)} ms`,
    );
  }, 1000);
  timer.unref();
  return () => clearInterval(timer);
}
