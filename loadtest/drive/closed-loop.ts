/**
 * The closed loop with our own client: `connections` senders, each sending its next request when
 * the previous one completed. Used when requests stream (TTFT and inter-token gaps need a client that
 * reads the SSE stream); plain request mixes use autocannon (`autocannon-loop.ts`). Latency counts
 * from the actual send, as closed-loop tools do.
 */

import { drain, sendingOver, type Phase } from './phase.js';

/** Runs `connections` senders until a limit; resolves when all have stopped. */
export async function runClosedLoop(phase: Phase, connections: number): Promise<void> {
  const { recorder, sender, source } = phase;
  let planned = 0;
  let pending = 0;
  const worker = async (): Promise<void> => {
    while (!sendingOver(phase, planned)) {
      const req = source.next();
      planned++;
      pending++;
      const sentAt = performance.now();
      const promise = sender.send(req, recorder);
      recorder.noteSent(sentAt, sentAt, sender.active);
      const outcome = await promise;
      pending--;
      recorder.record(req, sentAt, outcome);
      req.session?.finish(outcome.error === null ? outcome.reply : null);
    }
  };
  const workers = Array.from({ length: connections }, worker);
  // Workers end by themselves once sending is over; drain cuts requests still running after drainMs.
  const all = Promise.all(workers);
  let done = false;
  void all.then(() => (done = true));
  while (!done && !sendingOver(phase, planned)) await new Promise((r) => setTimeout(r, 10));
  await drain(phase, () => pending);
  await all;
}
