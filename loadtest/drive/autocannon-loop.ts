/**
 * The closed loop for plain (non-streaming) request mixes, driven by autocannon: `connections`
 * keep-alive connections each sending the next planned request when the previous answer is complete.
 * autocannon builds each request through `setupRequest`, hands the body to `onResponse` and then
 * emits `response` with the latency, synchronously for the same connection; that order is what
 * pairs a latency with its planned request (tenant, kind, session).
 */

import autocannon from 'autocannon';
import { replyOf, type Outcome } from '../client/http-sender.js';
import type { PlannedRequest } from '../workload/planned-request.js';
import { drain, sendingOver, type Phase } from './phase.js';

interface PlanContext {
  plan?: PlannedRequest;
}

/**
 * Runs autocannon against `origins` (connections spread over them) until a limit. Requests autocannon loses (a connection error or
 * timeout mid-request) are counted by error code without a tenant.
 */
export async function runAutocannonLoop(
  phase: Phase,
  origins: string[],
  connections: number,
  timeoutMs: number,
): Promise<void> {
  const { recorder, source } = phase;
  const outstanding = new Set<PlannedRequest>();
  let planned = 0;
  /** The body autocannon handed to `onResponse`, waiting for the `response` event that follows it. */
  const pending: { answer: { plan: PlannedRequest | undefined; body: string } | null } = { answer: null };

  let finished!: (err: unknown) => void;
  const done = new Promise<unknown>((resolve) => (finished = resolve));
  const instance = autocannon(
    {
      // autocannon spreads connections over an array of URLs (lib/url.js); its typings only say string.
      url: origins as unknown as string,
      connections,
      pipelining: 1,
      duration: Math.max(0.001, (phase.durationMs - (performance.now() - recorder.phaseStart)) / 1000),
      maxOverallRequests: phase.maxRequests,
      timeout: Math.max(1, Math.ceil(timeoutMs / 1000)),
      requests: [
        {
          setupRequest: (req, ctx) => {
            const context = ctx as PlanContext;
            const plan = source.next();
            planned++;
            outstanding.add(plan);
            context.plan = plan;
            return { ...req, method: 'POST', path: plan.path, headers: plan.headers, body: plan.body };
          },
          onResponse: (_status, body, ctx) => {
            pending.answer = { plan: (ctx as PlanContext).plan, body };
          },
        },
      ],
    },
    (err: unknown) => finished(err),
  );
  instance.on('response', (_client: unknown, status: number, _bytes: number, responseTime: number) => {
    const a = pending.answer;
    pending.answer = null;
    const now = performance.now();
    const plan = a?.plan;
    if (plan === undefined) return;
    outstanding.delete(plan);
    const ok = status >= 200 && status < 300;
    const outcome: Outcome = {
      status,
      error: ok ? null : `http_${status}`,
      sentAt: now - responseTime,
      endAt: now,
      firstTokenAt: null,
      tokens: 0,
      gaps: [],
      reply: ok && plan.session !== null && a !== null ? replyOf(a.body) : null,
    };
    recorder.noteSent(outcome.sentAt, outcome.sentAt, connections);
    recorder.record(plan, outcome.sentAt, outcome);
    plan.session?.finish(outcome.reply);
  });
  instance.on('reqError', (err: Error & { code?: unknown }) => {
    const code =
      typeof err.code === 'string' ? err.code : err.message === 'request timed out' ? 'timeout' : 'error';
    recorder.recordLost(code);
  });
  const watch = setInterval(() => {
    if (sendingOver(phase, planned)) instance.stop();
  }, 20);
  let failure: unknown;
  try {
    failure = await done;
  } finally {
    clearInterval(watch);
  }
  if (failure !== null && failure !== undefined) {
    throw failure instanceof Error ? failure : new Error(`autocannon: ${JSON.stringify(failure)}`);
  }
  // autocannon closes its connections when it stops; requests it lost never finish their session turn.
  for (const plan of outstanding) plan.session?.finish(null);
  await drain(phase, () => 0);
}
