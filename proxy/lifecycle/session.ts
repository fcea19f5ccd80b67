/**
 * The per-request session: the captured request, the plan it runs on, and the forwarding state
 * machine (route, pick, dispatch, stream back, finish). It is also the undici dispatch handler, so
 * a request costs one object of fixed shape. It never touches uWS objects (see Downstream).
 */
import type { Plan } from '../plan/plan.js';
import type { Route } from '../route/route-table.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Downstream } from './downstream.js';
import { nowMs } from './clock.js';
import { classifyUpstreamError } from './upstream-errors.js';
import { Errors, SluiceError, errorBody, errorEvent, type ErrorKind } from './errors.js';
import { responseHeaders } from './headers.js';

/** What a session needs from the server that owns it. */
export interface SessionHost {
  readonly stats: StatsRegistry;
  /** True while draining: every response closes its connection. */
  readonly draining: boolean;
  /** Called exactly once per session, when it is finished. */
  sessionDone(s: Session): void;
}

/** The subset of undici's DispatchController the session uses. */
interface Controller {
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

/** How many extra attempts a request may make after a failure that never reached a node. */
const MAX_CONNECT_RETRIES = 2;

const JSON_UNPARSED = 0;
const JSON_OK = 1;
const JSON_INVALID = 2;

export class Session {
  readonly host: SessionHost;
  readonly plan: Plan;
  readonly downstream: Downstream;
  /** Request id (client's `x-request-id` when valid, else generated). */
  readonly id: string;
  /** Upper-case method. */
  readonly method: string;
  /** Path without query string. */
  readonly path: string;
  /** Path with query string, as forwarded. */
  readonly url: string;
  /** Lower-case Host without port. */
  readonly hostName: string;
  /** Forwarded request headers, flat `[name, value, ...]`, lower-case names. */
  readonly headers: string[];
  /** Body bytes, or null when the request had none. */
  body: Buffer | null = null;
  /** Arrival time, ms (monotonic). */
  readonly startMs: number;
  route: Route | null = null;
  node: UpstreamNode | null = null;
  /** Attempts made so far (1 after the first dispatch). */
  attempt = 0;
  /** Status sent to the client (0 until decided). */
  status = 0;
  /** Dispatch time of the current attempt, ms. */
  private dispatchMs = 0;
  private controller: Controller | null = null;
  private totalTimer: NodeJS.Timeout | null = null;
  private sse = false;
  private finished = false;
  private jsonState = JSON_UNPARSED;
  private jsonModel: string | null = null;

  constructor(
    host: SessionHost,
    plan: Plan,
    downstream: Downstream,
    id: string,
    method: string,
    path: string,
    url: string,
    hostName: string,
    headers: string[],
  ) {
    this.host = host;
    this.plan = plan;
    this.downstream = downstream;
    this.id = id;
    this.method = method;
    this.path = path;
    this.url = url;
    this.hostName = hostName;
    this.headers = headers;
    this.startMs = nowMs();
  }

  /** Value of a forwarded request header (lower-case name), or undefined. */
  header(name: string): string | undefined {
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) if (h[i] === name) return h[i + 1];
    return undefined;
  }

  /** The body's JSON `model` field, or null (no body, not JSON, or no string `model`). Parsed once. */
  model(): string | null {
    if (this.jsonState === JSON_UNPARSED) {
      this.jsonState = JSON_INVALID;
      if (this.body !== null) {
        try {
          const v: unknown = JSON.parse(this.body.toString('utf8'));
          this.jsonState = JSON_OK;
          if (typeof v === 'object' && v !== null && typeof (v as { model?: unknown }).model === 'string') {
            this.jsonModel = (v as { model: string }).model;
          }
        } catch {
          // Not JSON: model routes simply do not match.
        }
      }
    }
    return this.jsonModel;
  }

  /** Runs the request once its body is complete: route, pick a node, dispatch. */
  run(): void {
    // HOT
    const route = this.plan.routes.match(this);
    if (route === null) {
      const hint =
        this.jsonState === JSON_INVALID && this.body !== null ? ' (the body is not valid JSON)' : '';
      this.host.stats.countRejected(Errors.routeNotFound.id);
      this.fail(Errors.routeNotFound, `no route matches ${this.method} ${this.path}${hint}`);
      return;
    }
    this.route = route;
    const total = route.timeouts.totalMs;
    if (total > 0) this.totalTimer = setTimeout(onTotalTimeout, total, this);
    this.dispatch(null);
  }

  private dispatch(exclude: UpstreamNode | null): void {
    // HOT
    const route = this.route!;
    const node = route.pool.pick(exclude);
    if (node === null) {
      this.fail(Errors.noHealthyNode, `pool ${route.pool.name} has no node to serve the request`, [
        'retry-after',
        '1',
      ]);
      return;
    }
    this.node = node;
    this.attempt++;
    node.inFlight++;
    node.attempts++;
    this.dispatchMs = nowMs();
    node.dispatch(
      {
        method: this.method,
        path: this.url,
        headers: this.headers,
        body: this.body,
        ttfbMs: route.timeouts.ttfbMs,
        idleMs: route.timeouts.idleMs,
      },
      this,
    );
  }

  // ---- undici dispatch handler ----

  onRequestStart(controller: Controller): void {
    this.controller = controller;
    if (this.finished) controller.abort(new Error('request already finished'));
  }

  onResponseStart(
    _c: Controller,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // HOT
    if (this.finished) return;
    this.route!.stats.ttfb.recordMs(nowMs() - this.dispatchMs);
    const ct = headers['content-type'];
    this.sse = typeof ct === 'string' && ct.startsWith('text/event-stream');
    const cl = headers['content-length'];
    const length = typeof cl === 'string' && this.sse === false ? Number(cl) : -1;
    const noBody = this.method === 'HEAD' || status === 204 || status === 304;
    this.status = status;
    const out = responseHeaders(headers, this.id);
    // While draining, tell the client not to reuse the connection (uWS closes it when the drain ends).
    if (this.host.draining) out.push('connection', 'close');
    this.downstream.start(status, out, Number.isFinite(length) ? length : -1, noBody);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    // HOT
    if (this.finished) return;
    if (!this.downstream.write(chunk)) controller.pause();
  }

  onResponseEnd(): void {
    if (this.finished) return;
    this.downstream.end();
    this.finish();
  }

  onResponseError(_c: Controller, err: Error): void {
    if (this.finished) return;
    const node = this.node;
    if (node !== null) {
      node.inFlight--;
      node.failures++;
    }
    const e = err instanceof SluiceError ? err : classifyUpstreamError(err);
    if (this.downstream.started) {
      // Headers went out: the status is fixed. An SSE client gets an error event before the close;
      // any other body is cut so the client sees a truncated response rather than a short success.
      if (this.sse) {
        this.downstream.write(Buffer.from(errorEvent(e.kind, e.message)));
        this.downstream.end();
      } else {
        this.downstream.destroy();
      }
      this.node = null;
      this.finish();
      return;
    }
    this.node = null;
    if (e.kind.retryable && this.attempt <= MAX_CONNECT_RETRIES && this.route!.pool.members.length > 1) {
      this.dispatch(node);
      return;
    }
    this.fail(e.kind, e.message, e.headers);
  }

  // ---- downstream events (called by the server adapter) ----

  /** The request body is complete (null when empty): run the request. */
  onBody(body: Buffer | null): void {
    this.body = body;
    this.run();
  }

  /** The body exceeded the listener's limit. */
  onBodyTooLarge(): void {
    this.host.stats.countRejected(Errors.bodyTooLarge.id);
    this.fail(Errors.bodyTooLarge, 'request body exceeds the size limit');
  }

  /** The client can take more bytes: resume the upstream body. */
  onDownstreamDrain(): void {
    this.controller?.resume();
  }

  /** The client disconnected: abort the upstream attempt and release everything. */
  onDownstreamAborted(): void {
    if (this.finished) return;
    if (this.route !== null) this.route.stats.aborted++;
    this.status = 499;
    // Finish first: the abort re-enters onResponseError, which must see a finished session and
    // neither count a node failure nor replace the 499.
    const controller = this.controller;
    this.finish();
    controller?.abort(new Error('client disconnected'));
  }

  /** The route's total timeout fired. */
  onTotalTimeout(): void {
    this.totalTimer = null;
    if (this.finished) return;
    const err = new SluiceError(
      Errors.totalTimeout,
      `upstream did not finish within ${this.route!.timeouts.totalMs} ms`,
    );
    if (this.controller !== null) this.controller.abort(err);
    else this.onResponseError(null as unknown as Controller, err);
  }

  /** Sends a local error reply (before any response byte went out) and finishes. */
  fail(kind: ErrorKind, message: string, extraHeaders: readonly string[] = []): void {
    if (this.finished) return;
    this.status = kind.status;
    const headers = ['content-type', 'application/json', 'x-request-id', this.id, ...extraHeaders];
    this.downstream.reply(
      kind.status,
      headers,
      errorBody(kind, message),
      kind.closeConnection || this.host.draining,
    );
    this.finish();
  }

  private finish(): void {
    // HOT
    if (this.finished) return;
    this.finished = true;
    if (this.totalTimer !== null) clearTimeout(this.totalTimer);
    if (this.node !== null) {
      this.node.inFlight--;
      this.node = null;
    }
    const route = this.route;
    if (route !== null) {
      route.stats.count(this.status);
      route.stats.duration.recordMs(nowMs() - this.startMs);
    }
    this.plan.release();
    this.host.sessionDone(this);
  }
}

function onTotalTimeout(s: Session): void {
  s.onTotalTimeout();
}
