/**
 * The batch API with `server.workers`: its job worker, file store and idempotency store run in the
 * main thread alone, so a worker thread that takes a batch API request (`/v1/batches`,
 * `/v1/files`, `/v1/batch`) passes it on: the method, target, host, headers and body go to the
 * main thread, which answers it there with a session of its own, and the whole answer comes back
 * (status, headers, body), which the worker sends to its client. The worker's session counts the
 * request (metrics, access log, under the tenant and error code the main thread found) as any
 * other it serves; the main thread's copy counts no request (only its refusals, such as a wrong
 * key, are counted where they are made). A client that leaves is told to the main thread, which
 * stops the work as for its own client; so does a worker that dies.
 *
 * Worker side: `EndpointRelayClient` (the worker's `LocalEndpoints`). Main side: `RelayedCalls`.
 */
import { BufferedDownstream } from '../lifecycle/buffered-downstream.js';
import { Errors, errorBody } from '../lifecycle/errors.js';
import type { LocalEndpoints, LocalWork } from '../lifecycle/local-endpoints.js';
import { Session, type SessionHost } from '../lifecycle/session.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import { bufferOf, exact, RelayIds, relayKey, relayWorker } from './relay-wire.js';

/** A batch API request a worker thread passes to the main thread. */
export interface RelayedCallStart {
  t: 'endpoint';
  /** The worker's number for the call (unique among its calls in flight). */
  id: number;
  requestId: string;
  method: string;
  path: string;
  url: string;
  host: string;
  /** Request headers, flat `[name, value, ...]`. */
  headers: string[];
  body: Uint8Array | null;
}

/** The worker's client left before the answer: the main thread stops the call's work. */
export interface RelayedCallAbort {
  t: 'endpoint-abort';
  id: number;
}

/** The main thread's whole answer to a relayed call. */
export interface RelayedCallDone {
  t: 'endpoint-done';
  id: number;
  status: number;
  headers: string[];
  body: Uint8Array;
  /** The answer was cut after its head (the worker answers 500 instead of a partial body). */
  truncated: boolean;
  /** The tenant the main thread authenticated ('' for none). */
  tenant: string;
  /** The error code of Sluice's own error answer (a wrong key: `invalid_api_key`), or null. */
  errorCode: string | null;
}

/**
 * The answer to a call when the main thread has no batch API to answer it with (it is shutting
 * down): 503, as a request that arrives while Sluice drains.
 */
function unavailableCall(id: number): RelayedCallDone {
  return {
    t: 'endpoint-done',
    id,
    status: Errors.draining.status,
    headers: ['content-type', 'application/json'],
    body: Buffer.from(errorBody(Errors.draining, 'the batch API is not running in this process now')),
    truncated: false,
    tenant: '',
    errorCode: Errors.draining.code,
  };
}

/** A worker's call waiting for the main thread; its session's `local` work. */
class WaitingCall implements LocalWork {
  readonly client: EndpointRelayClient;
  readonly id: number;
  readonly session: Session;

  constructor(client: EndpointRelayClient, id: number, session: Session) {
    this.client = client;
    this.id = id;
    this.session = session;
  }

  abort(): void {
    this.client.aborted(this);
  }
}

/** A worker thread's side: the endpoints it owns are answered by the main thread. */
export class EndpointRelayClient implements LocalEndpoints {
  private readonly post: (m: RelayedCallStart | RelayedCallAbort) => void;
  private readonly ownsPath: (path: string) => boolean;
  private readonly waiting = new Map<number, WaitingCall>();
  private readonly ids = new RelayIds();

  /** `owns`: the paths the main thread's endpoints answer (the batch API's). */
  constructor(post: (m: RelayedCallStart | RelayedCallAbort) => void, owns: (path: string) => boolean) {
    this.post = post;
    this.ownsPath = owns;
  }

  /** Calls sent and not answered yet. */
  get pending(): number {
    return this.waiting.size;
  }

  owns(path: string): boolean {
    // HOT
    return this.ownsPath(path);
  }

  handle(s: Session): void {
    const id = this.ids.next();
    const call = new WaitingCall(this, id, s);
    this.waiting.set(id, call);
    s.local = call;
    this.post({
      t: 'endpoint',
      id,
      requestId: s.id,
      method: s.method,
      path: s.path,
      url: s.url,
      host: s.hostName,
      headers: s.headers,
      body: s.body === null ? null : exact(s.body),
    });
  }

  /** The main thread answered call `m.id`: its client gets the answer. */
  done(m: RelayedCallDone): void {
    const call = this.waiting.get(m.id);
    if (call === undefined) return;
    this.waiting.delete(m.id);
    const s = call.session;
    s.local = null;
    // The request is counted here, under the tenant and error code the main thread found.
    if (m.tenant !== '') {
      s.tenant = m.tenant;
      s.tenantInfo = s.plan.tenants.table?.get(m.tenant) ?? null;
    }
    if (m.truncated) {
      s.fail(Errors.internal, 'the batch API answer was cut short');
      return;
    }
    s.rec.errorCode = m.errorCode;
    s.respond(m.status, m.headers, bufferOf(m.body));
  }

  /** The call's client left. */
  aborted(call: WaitingCall): void {
    if (!this.waiting.delete(call.id)) return;
    this.post({ t: 'endpoint-abort', id: call.id });
  }
}

/**
 * The main thread's side of one relayed call: the downstream and host of a session that runs the
 * main thread's endpoints and keeps their answer, sent back once when the session ends. The
 * session records nothing (the worker's session counts the request).
 */
class RelayedCall extends BufferedDownstream implements SessionHost {
  readonly stats: StatsRegistry;
  readonly endpoints: LocalEndpoints;
  /** The main thread's server: the host of the sessions the endpoints start (a batch's items). */
  private readonly host: SessionHost;
  private readonly calls: RelayedCalls;
  private readonly key: number;
  private readonly id: number;
  private readonly send: (m: RelayedCallDone) => void;
  private session: Session | null = null;

  constructor(
    calls: RelayedCalls,
    host: SessionHost,
    endpoints: LocalEndpoints,
    key: number,
    id: number,
    send: (m: RelayedCallDone) => void,
  ) {
    super();
    this.calls = calls;
    this.host = host;
    this.stats = host.stats;
    this.endpoints = endpoints;
    this.key = key;
    this.id = id;
    this.send = send;
  }

  get draining(): boolean {
    return this.host.draining;
  }

  /** Answers `m` with the endpoints on `plan`; the answer is sent when the session ends. */
  run(plan: Plan, m: RelayedCallStart): void {
    const s = new Session(this, plan, this, m.requestId, m.method, m.path, m.url, m.host, m.headers);
    s.body = m.body === null ? null : bufferOf(m.body);
    s.recorded = false;
    this.session = s;
    plan.acquire();
    if (this.endpoints.owns(m.path)) this.endpoints.handle(s);
    else s.fail(Errors.routeNotFound, `no endpoint ${m.method} ${m.path}`);
  }

  /** The worker's client left: the work stops as for a client of this thread, nothing is sent. */
  abort(): void {
    if (this.aborted || this.session === null) return;
    this.aborted = true;
    this.session.onDownstreamAborted();
  }

  sessionStarted(s: Session): void {
    // The endpoints' own requests (a synchronous batch's items) are the server's.
    if (s !== this.session) this.host.sessionStarted(s);
  }

  sessionDone(s: Session): void {
    if (s !== this.session) {
      this.host.sessionDone(s);
      return;
    }
    this.session = null;
    this.calls.forget(this.key);
    if (this.aborted) return;
    this.send({
      t: 'endpoint-done',
      id: this.id,
      status: this.status,
      headers: [...this.responseHeaders],
      body: exact(this.body()),
      truncated: this.truncated,
      tenant: s.tenant,
      errorCode: s.rec.errorCode,
    });
  }
}

/** The main thread's side: the batch API requests worker threads passed on, being answered. */
export class RelayedCalls {
  private readonly calls = new Map<number, RelayedCall>();

  /** Calls being answered now. */
  get size(): number {
    return this.calls.size;
  }

  /**
   * Answers worker `index`'s call `m` with `endpoints` on `plan` (null: no batch API here now, a
   * 503), once, through `send`; `host` is the main thread's server.
   */
  start(
    index: number,
    m: RelayedCallStart,
    host: SessionHost | null,
    endpoints: LocalEndpoints | null,
    plan: Plan,
    send: (r: RelayedCallDone) => void,
  ): void {
    if (host === null || endpoints === null) {
      send(unavailableCall(m.id));
      return;
    }
    const key = relayKey(index, m.id);
    const call = new RelayedCall(this, host, endpoints, key, m.id, send);
    this.calls.set(key, call);
    call.run(plan, m);
  }

  /** The client of worker `index`'s call `id` left. */
  abort(index: number, id: number): void {
    this.calls.get(relayKey(index, id))?.abort();
  }

  /** Worker `index` died: its calls stop (the thread that replaces it numbers its calls from 1). */
  workerDied(index: number): void {
    for (const [key, call] of [...this.calls]) if (relayWorker(key) === index) call.abort();
  }

  forget(key: number): void {
    this.calls.delete(key);
  }
}
