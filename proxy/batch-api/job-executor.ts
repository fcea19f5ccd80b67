/**
 * Executes durable batch items through the proxy itself: each item becomes an in-process request
 * on the current plan, as its batch's tenant, with the host and route-matched headers of the
 * request that created the batch, at the jobs' admission class (the lowest by default),
 * so batch work waits behind interactive traffic and obeys the same limits. A refusal by Sluice
 * itself (admission full, a rate limit) is waited out inside the same claim rather than spending
 * one of the item's attempts. It never touches the job database: the worker records results.
 */
import { nowMs } from '../lifecycle/clock.js';
import { Errors } from '../lifecycle/errors.js';
import { getFlat } from '../lifecycle/headers.js';
import type { SessionHost } from '../lifecycle/session.js';
import type { ItemExecutor } from '../jobs/job-worker.js';
import type { ItemResult, JobItem } from '../jobs/job-types.js';
import type { Plan } from '../plan/plan.js';
import type { Tenant } from '../tenant/tenant-table.js';
import { InternalRequest, notJsonObject, type InternalRequestOwner } from './internal-request.js';

/** Shortest and longest wait before offering a refused item again, ms. */
const MIN_WAIT_MS = 50;
const MAX_WAIT_MS = 5000;

/** How the executor reaches the proxy. */
export interface ExecutorContext {
  host: SessionHost;
  /** The plan new requests run on. */
  plan: () => Plan;
  /** Admission class of job items; null: the tenant's own. */
  priorityClass: () => number | null;
}

/** Counters since start. */
export interface ExecutorStats {
  /** In-process requests made (a refused-then-retried item counts each time). */
  dispatched: number;
  /** Times Sluice itself refused an item (admission or rate limit) and the executor waited. */
  deferred: number;
}

/** The `ItemExecutor` the job worker runs in a Sluice process. */
export class ProxyItemExecutor implements ItemExecutor {
  readonly stats: ExecutorStats = { dispatched: 0, deferred: 0 };

  constructor(private readonly ctx: ExecutorContext) {}

  async execute(item: JobItem, signal: AbortSignal): Promise<ItemResult> {
    const body = Buffer.from(item.body);
    for (;;) {
      signal.throwIfAborted();
      const plan = this.ctx.plan();
      const table = plan.tenants.table;
      const tenant = table === null ? null : table.get(item.owner);
      if (table !== null && tenant === null) {
        const kind = Errors.invalidApiKey;
        const message = `the batch's tenant "${item.owner}" is no longer configured`;
        return {
          status: kind.status,
          body: { error: { message, type: kind.type, param: null, code: kind.code } },
        };
      }
      const r = await this.once(plan, item, body, tenant, signal);
      if (r.attempts === 0 && (r.status === 429 || r.status === 503) && !hardRefusal(r)) {
        this.stats.deferred++;
        await wait(refusalWaitMs(r), signal);
        continue;
      }
      if (r.status === 499) throw new Error('aborted before the item finished');
      if (r.truncated) throw new Error('the node cut the response short');
      const text = r.body().toString('utf8');
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      // An output line's body is the node's JSON object (as OpenAI's always is): a 2xx without one
      // (an HTML page from a gateway, an empty 200 or 204, JSON null or an array) is not a result
      // but a failed attempt, retried like one, as the synchronous endpoint counts it failed.
      const problem = notJsonObject(r, text, parsed);
      if (problem !== null) throw new Error(problem);
      return { status: r.status, body: parsed === undefined ? text : parsed };
    }
  }

  private once(
    plan: Plan,
    item: JobItem,
    body: Buffer,
    tenant: Tenant | null,
    signal: AbortSignal,
  ): Promise<InternalRequest> {
    return new Promise((resolve) => {
      const owner: InternalRequestOwner = {
        internalDone: (r) => {
          signal.removeEventListener('abort', onAbort);
          resolve(r);
        },
      };
      const r = new InternalRequest(this.ctx.host, owner, item.index);
      const onAbort = (): void => r.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.stats.dispatched++;
      r.run(plan, {
        path: item.url,
        // As the creating request was sent: its host and the headers routes match on (never its
        // credentials: the item runs as the batch's tenant, item.owner).
        host: item.host,
        headers: item.headers,
        body,
        id: `batch_req_${item.batchId}_${item.index}_${item.attempts}`,
        tenant,
        priorityClass: this.ctx.priorityClass(),
      });
    });
  }
}

/** A refusal that waiting will not cure (a used-up quota says `x-should-retry: false`). */
function hardRefusal(r: InternalRequest): boolean {
  return getFlat(r.responseHeaders, 'x-should-retry') === 'false';
}

/** The refusal's `retry-after-ms` (or `retry-after` seconds), clamped. */
function refusalWaitMs(r: InternalRequest): number {
  const h = r.responseHeaders;
  let ms = NaN;
  for (let i = 0; i < h.length; i += 2) {
    if (h[i] === 'retry-after-ms') ms = Number(h[i + 1]);
    else if (h[i] === 'retry-after' && Number.isNaN(ms)) ms = Number(h[i + 1]) * 1000;
  }
  if (!Number.isFinite(ms)) ms = 1000;
  return Math.min(MAX_WAIT_MS, Math.max(MIN_WAIT_MS, ms));
}

function wait(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const started = nowMs();
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(new Error(`aborted after waiting ${Math.round(nowMs() - started)} ms for admission`));
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
