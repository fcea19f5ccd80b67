/**
 * The open loop: requests leave at a fixed arrival rate whatever the answers do, and each latency
 * is measured from the request's intended send time, so a slow server (or a late generator) shows up
 * as latency instead of silently lowering the offered load (no coordinated omission). Arrivals beyond
 * `max_in_flight` are not sent and count as `client_overflow` errors.
 */

import type { LoadSpec, WorkloadSpec } from '../scenario/scenario-types.js';
import { SeededRandom } from '../sim/prng.js';
import { ArrivalSchedule } from '../workload/arrival-schedule.js';
import type { PlannedRequest } from '../workload/planned-request.js';
import { WeightedPicker } from '../workload/request-source.js';
import { drain, markStopped, sendingOver, type Phase } from './phase.js';

/** Arrival streams: one per tenant with its own rate, plus one shared by the others. */
interface Streams {
  rates: number[];
  tenantOf: (stream: number, rng: SeededRandom) => number;
}

function buildStreams(workload: WorkloadSpec, load: LoadSpec): Streams {
  const own: number[] = [];
  const shared: number[] = [];
  workload.tenants.forEach((t, i) => (t.rate !== null ? own.push(i) : shared.push(i)));
  const rates = own.map((i) => workload.tenants[i]?.rate ?? 0);
  const picker = new WeightedPicker(shared.map((i) => workload.tenants[i]?.weight ?? 1));
  if (shared.length > 0 && load.rate !== null) rates.push(load.rate);
  return {
    rates,
    tenantOf: (stream, rng) =>
      stream < own.length ? (own[stream] as number) : (shared[picker.pick(rng)] as number),
  };
}

/** Total arrivals per second the open loop offers. */
export function offeredRate(workload: WorkloadSpec, load: LoadSpec): number {
  return buildStreams(workload, load).rates.reduce((a, b) => a + b, 0);
}

/** Runs the open loop of `phase` until a limit; resolves when every request has settled. */
export async function runOpenLoop(
  phase: Phase,
  workload: WorkloadSpec,
  load: LoadSpec,
  seed: number,
): Promise<void> {
  const streams = buildStreams(workload, load);
  const rng = SeededRandom.fromText(`${seed}/arrivals`);
  const schedule = new ArrivalSchedule(streams.rates, load.arrivals === 'poisson', rng);
  const { recorder, sender, source } = phase;
  const start = recorder.phaseStart;
  let planned = 0;
  let pending = 0;

  const dispatch = (req: PlannedRequest, intendedAt: number): void => {
    if (sender.active >= load.maxInFlight) {
      recorder.recordUnsent(req, intendedAt, 'client_overflow');
      req.session?.finish(null);
      return;
    }
    pending++;
    const promise = sender.send(req, recorder);
    recorder.noteSent(intendedAt, performance.now(), sender.active);
    void promise.then((outcome) => {
      pending--;
      recorder.record(req, intendedAt, outcome);
      req.session?.finish(outcome.error === null ? outcome.reply : null);
    });
  };

  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now() - start;
      for (;;) {
        const next = schedule.peek();
        if (next === undefined || next.atMs > now || next.atMs >= phase.durationMs) break;
        if (sendingOver(phase, planned)) break;
        schedule.shift();
        for (const req of source.arrival(streams.tenantOf(next.stream, rng))) {
          planned++;
          dispatch(req, start + next.atMs);
        }
      }
      const next = schedule.peek();
      if (next === undefined || next.atMs >= phase.durationMs || sendingOver(phase, planned)) {
        markStopped(phase, start + phase.durationMs);
        resolve();
        return;
      }
      setTimeout(tick, Math.max(0, next.atMs - (performance.now() - start)));
    };
    tick();
  });
  await drain(phase, () => pending);
}
