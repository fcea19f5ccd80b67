/**
 * One request Sluice makes to itself on behalf of a batch item: a real `Session` (routing, tenant
 * limits, admission at a chosen priority, micro-batching, retries, metrics) whose downstream is
 * this object, which keeps the response in memory instead of writing to a socket. It never reads
 * or writes HTTP itself.
 */
import { BufferedDownstream } from '../lifecycle/buffered-downstream.js';
import { getFlat } from '../lifecycle/headers.js';
import { nowMs } from '../lifecycle/clock.js';
import { Session, type SessionHost } from '../lifecycle/session.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import type { Tenant } from '../tenant/tenant-table.js';

/**
 * Why a finished item's answer is not a result although its status says success: a 2xx whose body
 * is not a JSON object (an output line's or a result's `body` is always the node's JSON object, as
 * OpenAI's is): an empty body, a gateway's HTML page, or JSON that is `null`, an array, a number or
 * a string. Null when the answer is a result (a JSON object, or any non-2xx status). `parsed` is
 * the body parsed as JSON, undefined when it is not JSON. The synchronous and the durable endpoint
 * both word the failure with it.
 */
export function notJsonObject(r: InternalRequest, text: string, parsed: unknown): string | null {
  if (r.status < 200 || r.status >= 300) return null;
  if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return null;
  let what: string;
  if (text.length === 0) what = 'an empty body';
  else if (parsed === undefined) what = `content-type "${getFlat(r.responseHeaders, 'content-type') ?? ''}"`;
  else if (parsed === null) what = 'the JSON value null';
  else if (Array.isArray(parsed)) what = 'a JSON array';
  else what = `a JSON ${typeof parsed}`;
  return `the node answered ${r.status} without a JSON object (${what})`;
}

/** Receives each finished internal request (once). */
export interface InternalRequestOwner {
  internalDone(r: InternalRequest): void;
}

/** What an internal request needs to describe one call. */
export interface InternalCall {
  /** Path of the endpoint, e.g. `/v1/embeddings`. */
  path: string;
  /**
   * Host the item is sent to, lower-case without port (routes' `match.host`): the batch request's
   * own for `POST /v1/batch`, the creating request's for a durable batch.
   */
  host: string;
  /** Forwarded headers, flat `[name, value, ...]`, lower-case names; content-type and x-request-id are added. */
  headers: readonly string[];
  body: Buffer;
  /** Request id for logs and the node (`x-request-id`). */
  id: string;
  /** The tenant the item runs as; null: the anonymous tenant (if any). */
  tenant: Tenant | null;
  /** Admission class; null: the tenant's. */
  priorityClass: number | null;
}

/**
 * A buffered in-process request. `status` is 0 until done; 499 when aborted. `truncated` is true
 * when the node's body was cut after the head (the status then says success but the body is not whole).
 */
export class InternalRequest extends BufferedDownstream implements SessionHost {
  readonly stats: StatsRegistry;
  /** Batch items cannot call the batch API themselves. */
  readonly endpoints = null;
  /** Upstream attempts the item took (a micro-batch reports its own count). */
  attempts = 0;
  /** From start to done, ms. */
  latencyMs = 0;
  private session: Session | null = null;
  private startMs = 0;

  constructor(
    private readonly host: SessionHost,
    private readonly owner: InternalRequestOwner,
    /** The owner's tag for this request, e.g. the item index. */
    readonly tag: number,
  ) {
    super();
    this.stats = host.stats;
  }

  get draining(): boolean {
    return this.host.draining;
  }

  /** Runs the call on `plan`; the owner's `internalDone` follows exactly once (possibly synchronously). */
  run(plan: Plan, call: InternalCall): void {
    // No content-length: like a client's (which the head reader consumes), it is the forwarded
    // body's, and a plugin's onRequest may replace the body.
    const headers = [...call.headers, 'content-type', 'application/json', 'x-request-id', call.id];
    const s = new Session(this, plan, this, call.id, 'POST', call.path, call.path, call.host, headers);
    s.body = call.body;
    s.internal = true;
    s.tenantInfo = call.tenant;
    // Known before the route's plugins run (a plugin reads it: auth-jwt lets an item of a caller
    // the batch API authenticated by key pass; an anonymous caller's items are checked like any
    // request); authenticate() confirms it.
    if (call.tenant !== null && !call.tenant.anonymous) s.tenant = call.tenant.name;
    s.priorityClass = call.priorityClass;
    this.session = s;
    this.startMs = nowMs();
    plan.acquire();
    this.stats.inFlight++;
    this.host.sessionStarted(s);
    s.run();
  }

  /** Gives up on the request (the batch was abandoned); `internalDone` follows with status 499. */
  abort(): void {
    if (this.aborted || this.session === null) return;
    this.session.onDownstreamAborted();
    this.aborted = true;
  }

  // ---- SessionHost ----

  sessionStarted(s: Session): void {
    this.host.sessionStarted(s);
  }

  sessionDone(s: Session): void {
    this.host.sessionDone(s);
    this.status = s.status;
    this.attempts = s.attempts;
    this.latencyMs = nowMs() - this.startMs;
    this.session = null;
    this.owner.internalDone(this);
  }
}
