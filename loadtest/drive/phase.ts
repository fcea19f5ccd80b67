/**
 * What every traffic driver shares: the request source, sender and recorder of one phase, and its
 * hard limits (duration, request count, drain time, an abort signal). A phase stops sending at
 * whichever limit comes first and never outlives duration + drain.
 */

import type { HttpSender } from '../client/http-sender.js';
import type { RequestSource } from '../workload/request-source.js';
import type { Recorder } from './recorder.js';

/** One phase (warm-up or measured) of one run. */
export interface Phase {
  source: RequestSource;
  /** Sends requests for the open loop and the streaming closed loop. */
  sender: HttpSender;
  recorder: Recorder;
  /** Sending stops this long after `recorder.phaseStart`, ms. */
  durationMs: number;
  /** Sending stops after this many requests. */
  maxRequests: number;
  /** After sending stops, requests in flight get this long before they are cut, ms. */
  drainMs: number;
  /** Aborts the phase early (Ctrl-C); results so far are kept. */
  signal: AbortSignal;
  /** When sending stopped (`performance.now()` ms), set by the first `sendingOver` that returns true. */
  stoppedAt: number | null;
}

/** True when the phase must stop sending now (and from then on); notes the time in `stoppedAt`. */
export function sendingOver(phase: Phase, planned: number): boolean {
  if (phase.stoppedAt !== null) return true;
  const now = performance.now();
  const over =
    planned >= phase.maxRequests ||
    now - phase.recorder.phaseStart >= phase.durationMs ||
    phase.signal.aborted ||
    phase.recorder.targetRefused();
  if (over) markStopped(phase, Math.min(now, phase.recorder.phaseStart + phase.durationMs));
  return over;
}

/** Notes that sending stopped at `at` (`performance.now()` ms); later successes count as drain. */
export function markStopped(phase: Phase, at: number): void {
  phase.stoppedAt ??= at;
  phase.recorder.sendingEndedAt ??= phase.stoppedAt;
}

/**
 * Waits until the sender has nothing in flight or `drainMs` passed, then aborts what is left (it is
 * recorded as `unfinished`) and waits for those to settle. Polls every 5 ms; bounded by drainMs.
 */
export async function drain(phase: Phase, pending: () => number): Promise<void> {
  const deadline = performance.now() + phase.drainMs;
  while (pending() > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5));
  }
  if (pending() > 0) phase.sender.abortAll();
  // Aborted requests settle within a few event-loop turns; this bound only guards against a bug.
  const hard = performance.now() + 2000;
  while (pending() > 0 && performance.now() < hard) await new Promise((r) => setTimeout(r, 1));
}
