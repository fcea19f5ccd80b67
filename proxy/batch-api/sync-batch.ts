/**
 * `POST /v1/batch`: validates the list of items, runs each as its own in-process request (so every
 * item gets routing, the caller's limits, admission, micro-batching and retries) under a
 * concurrency cap, and renders one result per item in input order. Partial success is a normal
 * 200; only a malformed request as a whole is refused. It does not write HTTP: the caller sends
 * what `render` returns.
 */
import { rawElements, rawMember, repeatsMember, withoutMember } from '../lifecycle/json-spans.js';
import type { SessionHost } from '../lifecycle/session.js';
import type { Plan } from '../plan/plan.js';
import type { Tenant } from '../tenant/tenant-table.js';
import { InternalRequest, notJsonObject, type InternalRequestOwner } from './internal-request.js';

/** A request-level problem: the whole batch is refused with 400 and nothing runs. */
export class SyncBatchInvalid extends Error {
  constructor(
    message: string,
    readonly param: string | null,
  ) {
    super(message);
  }
}

/** One validated item: its body as forwarded (without `custom_id`). */
export interface SyncItem {
  customId: string | null;
  body: Buffer;
}

/** The validated request. */
export interface SyncBatchRequest {
  endpoint: string;
  items: SyncItem[];
}

/** Limits applied by `parseSyncBatch`. */
export interface SyncBatchLimits {
  endpoints: readonly string[];
  maxItems: number;
}

/**
 * Checks the body `{ "endpoint": "/v1/embeddings", "items": [ {...request body, "custom_id"?}, ... ] }`
 * and returns the items ready to forward. Throws `SyncBatchInvalid` naming the offending field:
 * not JSON, no endpoint or one not allowed, items missing, empty or above `maxItems`, an item that
 * is not an object, a `custom_id` that is not a non-empty string or repeats, or `stream: true`
 * (a batch result holds whole responses).
 */
export function parseSyncBatch(
  json: unknown,
  limits: SyncBatchLimits,
  text: string | null = null,
): SyncBatchRequest {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new SyncBatchInvalid('the request body must be a JSON object with "endpoint" and "items"', null);
  }
  const { endpoint, items } = json as { endpoint?: unknown; items?: unknown };
  if (typeof endpoint !== 'string' || !limits.endpoints.includes(endpoint)) {
    throw new SyncBatchInvalid(
      `"endpoint" must be one of ${limits.endpoints.join(', ')}${typeof endpoint === 'string' ? ` (got ${endpoint})` : ''}`,
      'endpoint',
    );
  }
  if (!Array.isArray(items) || items.length === 0) {
    throw new SyncBatchInvalid('"items" must be a non-empty array of request bodies', 'items');
  }
  if (items.length > limits.maxItems) {
    throw new SyncBatchInvalid(
      `"items" holds ${items.length} items; at most ${limits.maxItems} are allowed per request (use /v1/batches for more)`,
      'items',
    );
  }
  const seen = new Map<string, number>();
  const out: SyncItem[] = new Array<SyncItem>(items.length);
  // Each item as the client wrote it (only `custom_id` taken out), when the text is at hand.
  const itemsText = text === null ? null : rawMember(text, 'items');
  const written = itemsText === null ? null : rawElements(itemsText);
  const raw = written !== null && written.length === items.length ? written : null;
  for (let i = 0; i < items.length; i++) {
    const item: unknown = items[i];
    if (typeof item !== 'object' || item === null || Array.isArray(item)) {
      throw new SyncBatchInvalid(`items[${i}] must be a JSON object (a request body)`, `items[${i}]`);
    }
    const { custom_id: customId, ...body } = item as Record<string, unknown>;
    if (customId !== undefined && (typeof customId !== 'string' || customId === '')) {
      throw new SyncBatchInvalid(`items[${i}].custom_id must be a non-empty string`, `items[${i}].custom_id`);
    }
    if (typeof customId === 'string') {
      const first = seen.get(customId);
      if (first !== undefined) {
        throw new SyncBatchInvalid(
          `items[${i}].custom_id "${customId}" repeats items[${first}].custom_id`,
          `items[${i}].custom_id`,
        );
      }
      seen.set(customId, i);
    }
    if (body['stream'] === true) {
      throw new SyncBatchInvalid(
        `items[${i}].stream must not be true: batch results carry whole responses`,
        `items[${i}].stream`,
      );
    }
    const asWritten = raw === null || repeatsMember(raw[i]!) ? null : withoutMember(raw[i]!, 'custom_id');
    out[i] = {
      customId: typeof customId === 'string' ? customId : null,
      body: Buffer.from(asWritten ?? JSON.stringify(body)),
    };
  }
  return { endpoint, items: out };
}

/** How a run was set up. */
export interface SyncBatchContext {
  host: SessionHost;
  plan: Plan;
  tenant: Tenant | null;
  /** The batch request's host (lower-case, without port): every item is sent to it, as routes see it. */
  hostName: string;
  /** Headers every item carries (the caller's, minus framing and ids). */
  headers: readonly string[];
  /** Request id of the batch; item i is `<id>-<i>`. */
  id: string;
  concurrency: number;
}

/**
 * Runs the items of one request, at most `concurrency` at a time, and calls `done` once when every
 * item has a result (or, after `abort`, once the running ones have stopped).
 */
export class SyncBatchRun implements InternalRequestOwner {
  private readonly results: (InternalRequest | null)[];
  private next = 0;
  private running = 0;
  private finished = 0;
  private stopped = false;
  /** True while `fill` is starting items (an item may finish synchronously inside it). */
  private filling = false;
  /** True once `done` was called. */
  private reported = false;
  private readonly live = new Set<InternalRequest>();

  constructor(
    private readonly ctx: SyncBatchContext,
    private readonly request: SyncBatchRequest,
    private readonly done: (run: SyncBatchRun) => void,
  ) {
    this.results = new Array<InternalRequest | null>(request.items.length).fill(null);
  }

  /**
   * Starts the items. The run holds its own reference on the plan until `done`, so a retired plan
   * stays open while items of a batch whose client left are still starting on it.
   */
  start(): void {
    this.ctx.plan.acquire();
    this.fill();
  }

  /** Stops starting items and aborts the running ones (the client left and nothing will replay the result). */
  abort(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const r of [...this.live]) r.abort();
  }

  internalDone(r: InternalRequest): void {
    this.live.delete(r);
    this.results[r.tag] = r;
    this.running--;
    this.finished++;
    // An item refused at once finishes inside `run`: the filling loop already running picks up
    // the freed slot, so a long batch of instant refusals never recurses.
    if (!this.filling && !this.stopped) this.fill();
    this.maybeDone();
  }

  private maybeDone(): void {
    if (this.filling || this.reported || this.running > 0) return;
    if (this.stopped || this.finished === this.request.items.length) {
      this.reported = true;
      this.ctx.plan.release();
      this.done(this);
    }
  }

  private fill(): void {
    const items = this.request.items;
    this.filling = true;
    try {
      while (!this.stopped && this.running < this.ctx.concurrency && this.next < items.length) {
        const i = this.next++;
        const r = new InternalRequest(this.ctx.host, this, i);
        this.running++;
        this.live.add(r);
        r.run(this.ctx.plan, {
          path: this.request.endpoint,
          host: this.ctx.hostName,
          headers: this.ctx.headers,
          body: items[i]!.body,
          id: `${this.ctx.id}-${i}`,
          tenant: this.ctx.tenant,
          priorityClass: null,
        });
      }
    } finally {
      this.filling = false;
    }
    this.maybeDone();
  }

  /** The response body: `{object, endpoint, results: [...], request_counts}` with results in input order. */
  render(): string {
    const items = this.request.items;
    let succeeded = 0;
    const parts: string[] = [];
    for (let i = 0; i < items.length; i++) {
      const r = this.results[i] ?? null;
      const line = renderResult(i, items[i]!.customId, r);
      if (line.ok) succeeded++;
      parts.push(line.text);
    }
    return (
      `{"object":"batch.result","endpoint":${JSON.stringify(this.request.endpoint)},"results":[${parts.join(',')}],` +
      `"request_counts":{"total":${items.length},"succeeded":${succeeded},"failed":${items.length - succeeded}}}`
    );
  }
}

/**
 * One result: `{index, custom_id, status, status_code, body, error, attempts, latency_ms}`.
 * `status` is `succeeded` for a whole 2xx answer whose body is a JSON object, else `failed` with
 * `error` taken from the OpenAI error body when there is one (a 2xx without a JSON object gets
 * `request_failed`, worded as the durable error file words it). A body that is valid JSON is
 * embedded as it came (no re-serialisation); anything else is kept as a string.
 */
function renderResult(
  index: number,
  customId: string | null,
  r: InternalRequest | null,
): { ok: boolean; text: string } {
  const head = `{"index":${index},"custom_id":${customId === null ? 'null' : JSON.stringify(customId)}`;
  if (r === null || r.status === 499) {
    return {
      ok: false,
      text: `${head},"status":"failed","status_code":null,"body":null,"error":{"message":"the batch was abandoned before this item finished","type":"server_error","code":"item_abandoned"},"attempts":${r?.attempts ?? 0},"latency_ms":${round2(r?.latencyMs ?? 0)}}`,
    };
  }
  const raw = r.body().toString('utf8');
  let parsed: unknown;
  let bodyText = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = undefined;
    bodyText = raw.length === 0 ? 'null' : JSON.stringify(raw);
  }
  const notObject = r.truncated ? null : notJsonObject(r, raw, parsed);
  const ok = r.status >= 200 && r.status < 300 && !r.truncated && notObject === null;
  let error = 'null';
  if (!ok) {
    const e =
      typeof parsed === 'object' && parsed !== null ? (parsed as { error?: unknown }).error : undefined;
    if (typeof e === 'object' && e !== null) error = JSON.stringify(e);
    else if (r.truncated)
      error =
        '{"message":"the node cut the response short","type":"server_error","code":"upstream_truncated"}';
    else if (notObject !== null)
      error = JSON.stringify({ message: notObject, type: 'server_error', code: 'request_failed' });
    else
      error = JSON.stringify({
        message: `the item failed with HTTP ${r.status}`,
        type: 'server_error',
        code: 'item_failed',
      });
  }
  return {
    ok,
    text:
      `${head},"status":"${ok ? 'succeeded' : 'failed'}","status_code":${r.status},"body":${bodyText},` +
      `"error":${error},"attempts":${r.attempts},"latency_ms":${round2(r.latencyMs)}}`,
  };
}

function round2(ms: number): number {
  return Math.round(ms * 100) / 100;
}
