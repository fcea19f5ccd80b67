/**
 * What both downstream engines (uWS, and Sluice's own HTTP/1.1 server) do with a captured request
 * head: the framing, size and method refusals, the body deadline, and the Session that serves an
 * accepted request. The one copy of these rules; the engines only parse and move bytes.
 */
import type { NodeLoadCells } from '../runtime/shared-table.js';
import { REFUSALS, Refusal } from '../metrics/refusals.js';
import { DeadlineList } from '../lifecycle/deadline-list.js';
import type { ListenerConfig } from '../../config/types.js';
import type { Downstream } from '../lifecycle/downstream.js';
import { Errors, errorBody, type ErrorKind } from '../lifecycle/errors.js';
import { Session, type SessionHost } from '../lifecycle/session.js';
import type { ListenerStats } from '../metrics/listener-stats.js';
import type { Plan } from '../plan/plan.js';
import type { RequestHead } from './request-head.js';
import { NEVER_SHED, type LoadShedder } from './load-shedder.js';
import { nextRequestId } from './request-id.js';
import type { DownstreamListener } from './uws-downstream.js';

/** A Downstream as the engines build it: the session attaches, then the body is collected. */
export interface ServerDownstream extends Downstream {
  /** Attaches the session that receives the connection's events. */
  attach(listener: DownstreamListener): void;
  /**
   * Collects the request body. `declared` is the Content-Length (-1 when chunked). The listener's
   * `onBody` runs once with the complete body, or `onBodyTooLarge` once when `max` is exceeded.
   */
  readBody(declared: number, max: number): void;
  /**
   * Whether a refusal of a declared body of `declared` bytes over the limit may keep the connection
   * while the body arrives and is dropped (uWS, up to its drop limit), rather than close it.
   */
  keepsRefusedBody(declared: number): boolean;
}

/** One bound listener's settings and counters, shared by its connections. */
export class ListenerRuntime {
  readonly config: ListenerConfig;
  readonly stats: ListenerStats;
  /** Position in the config's listeners (selects the listener's plugin chains). */
  readonly index: number;
  /** Body deadlines of the listener's uWS requests, under one timer. */
  readonly bodyDeadlines: DeadlineList;
  /**
   * With worker threads, the listener's open connections in every thread (a shared table's cell,
   * read against `max_connections`); null with one thread or without a cap.
   */
  sharedConnections: NodeLoadCells | null = null;
  private readonly host: SessionHost;

  constructor(config: ListenerConfig, stats: ListenerStats, host: SessionHost, index: number) {
    this.config = config;
    this.stats = stats;
    this.host = host;
    this.index = index;
    this.bodyDeadlines = new DeadlineList(config.body_timeout_ms);
  }

  /** A request body did not arrive within `body_timeout_ms`: 408 and close, counted. */
  bodyTimedOut(listener: DownstreamListener): void {
    this.stats.bodyTimeouts++;
    this.host.stats.countRejected(Errors.requestTimeout.id);
    listener.fail(
      Errors.requestTimeout,
      `the request body did not arrive within ${this.config.body_timeout_ms} ms`,
    );
  }
}

/** Turns captured heads into sessions, or refuses them. One per server. */
export class RequestIntake {
  /** Overload protection: read once per request before it becomes a session. */
  shedder: LoadShedder = NEVER_SHED;
  private readonly host: SessionHost;
  private readonly current: () => Plan;

  /** `current` returns the plan new requests should run on. */
  constructor(host: SessionHost, current: () => Plan) {
    this.host = host;
    this.current = current;
  }

  /**
   * Refuses `head` when its framing, size or method is not acceptable (the reply closes the
   * connection), else creates its Session, attaches it to `ds` and starts it (reading the body
   * first when there is one). Returns the session, or null when refused.
   */
  admit(l: ListenerRuntime, head: RequestHead, ds: ServerDownstream): Session | null {
    // HOT
    const cfg = l.config;
    if (head.framingError !== null) {
      this.refuse(ds, Errors.badFraming, `malformed request framing: ${head.framingError}`, head.requestId);
      return null;
    }
    if (head.url.length > cfg.max_url_bytes) {
      this.refuse(
        ds,
        Errors.urlTooLong,
        `request target longer than ${cfg.max_url_bytes} bytes`,
        head.requestId,
      );
      return null;
    }
    if (head.headerBytes > cfg.max_header_bytes) {
      this.refuse(
        ds,
        Errors.headersTooLarge,
        `request headers exceed ${cfg.max_header_bytes} bytes`,
        head.requestId,
      );
      return null;
    }
    if (head.headerCount > cfg.max_header_count) {
      this.refuse(
        ds,
        Errors.headersTooLarge,
        `more than ${cfg.max_header_count} request header fields`,
        head.requestId,
      );
      return null;
    }
    if (head.contentLength > cfg.max_body_bytes) {
      this.refuse(
        ds,
        Errors.bodyTooLarge,
        `request body of ${head.contentLength} bytes exceeds the limit of ${cfg.max_body_bytes}`,
        head.requestId,
        this.host.draining || !ds.keepsRefusedBody(head.contentLength),
      );
      return null;
    }
    if (head.method === 'CONNECT') {
      this.refuse(
        ds,
        Errors.methodNotSupported,
        'CONNECT is not supported: Sluice is a reverse proxy',
        head.requestId,
      );
      return null;
    }
    const shedder = this.shedder;
    if (shedder.shedding) {
      // Sluice itself is overloaded: the cheapest answer, prepared by the monitor, connection kept.
      shedder.shed++;
      const stats = this.host.stats;
      stats.countRejected(Errors.proxyOverloaded.id);
      stats.refused[Refusal.proxyOverloaded]!++;
      stats.accessLog?.writeRefused(503, REFUSALS[Refusal.proxyOverloaded]!.reason);
      // The prepared head plus the request id every answer carries (the client's when valid).
      const headers = shedder.replyHeaders.slice();
      headers.push('x-request-id', head.requestId ?? nextRequestId());
      ds.reply(503, headers, shedder.replyBody, false);
      return null;
    }
    const id = head.requestId ?? nextRequestId();
    head.headers.push('x-request-id', id);
    const plan = this.current();
    plan.acquire();
    this.host.stats.inFlight++;
    const s = new Session(
      this.host,
      plan,
      ds,
      id,
      head.method,
      head.path,
      head.url,
      head.hostName,
      head.headers,
    );
    s.listener = l.index;
    this.host.sessionStarted(s);
    ds.attach(s);
    if (head.contentLength > 0 || head.chunked) ds.readBody(head.contentLength, cfg.max_body_bytes);
    else s.run();
    return s;
  }

  /**
   * Refuses a request before it becomes a session; these kinds close the connection unless `close`
   * says otherwise (a declared body the engine reads and drops).
   */
  refuse(
    ds: Downstream,
    kind: ErrorKind,
    message: string,
    requestId: string | null = null,
    close = kind.closeConnection,
  ): void {
    const stats = this.host.stats;
    stats.countRejected(kind.id);
    const refusal = refusalOfKind(kind);
    stats.refused[refusal]!++;
    stats.accessLog?.writeRefused(kind.status, REFUSALS[refusal]!.reason);
    // The client's request id when it sent a valid one, else a new one, as on every other answer.
    ds.reply(
      kind.status,
      ['content-type', 'application/json', 'x-request-id', requestId ?? nextRequestId()],
      errorBody(kind, message),
      close,
    );
  }
}

/** The refusal counted for an error kind refused before a session exists (framing and limits). */
function refusalOfKind(kind: ErrorKind): Refusal {
  switch (kind) {
    case Errors.urlTooLong:
      return Refusal.urlTooLong;
    case Errors.headersTooLarge:
      return Refusal.headersTooLarge;
    case Errors.bodyTooLarge:
      return Refusal.bodyTooLarge;
    case Errors.methodNotSupported:
      return Refusal.methodNotSupported;
    case Errors.httpVersion:
      return Refusal.httpVersion;
    case Errors.requestTimeout:
      return Refusal.requestTimeout;
    default:
      return Refusal.badFraming;
  }
}
