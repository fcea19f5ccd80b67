/**
 * The admin listener (node:http, off the data path): liveness, readiness, Prometheus metrics, the
 * status page, stats and histograms, the active config, node counters and drain, the capacity
 * recommendation and reload. Bound to loopback by default; with `admin.token` every endpoint but
 * `/healthz` wants `Authorization: Bearer <token>` (or Basic with the token as password).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { AdminAuth } from './admin-auth.js';
import { HistogramsQueryError } from './histograms-view.js';

/** The answer of a drain or undrain request. */
export interface DrainResult {
  status: number;
  body: unknown;
}

/** The reads that `AdminTarget.refresh` brings up to date first. */
const REFRESHED_PATHS = new Set([
  '/metrics',
  '/admin/stats',
  '/admin/histograms',
  '/admin/nodes',
  '/admin/capacity',
]);

/** What the admin API reads and drives. */
export interface AdminTarget {
  /** True once the first plan serves and while not draining (`/readyz`). */
  ready(): boolean;
  /** False before the first plan exists: plan-dependent endpoints answer 503. */
  started(): boolean;
  metricsText(): string;
  /** Brings the counts up to date before a read of metrics, stats, histograms, nodes or capacity (worker threads). */
  refresh?(): Promise<void>;
  /** `GET /admin/config`: the active config with its secrets masked (`redactedConfig`). */
  configView(): unknown;
  nodesView(): unknown;
  /** `GET /admin/stats`; `detail`: include route × pool × node rows. */
  statsView(detail: boolean): unknown;
  /** `GET /admin/histograms`; throws HistogramsQueryError for a bad query. */
  histogramsView(query: URLSearchParams): unknown;
  /** Drains (true) or undrains a node named by pool and node (id, host:port or index). */
  drainNode(pool: string, node: string, drained: boolean): DrainResult;
  /** Per-pool capacity recommendation (`GET /admin/capacity`); absent: that path is a 404. */
  capacityView?(): unknown;
  reload(): Promise<{ ok: boolean; status: number; body: unknown }>;
  /** The status page's HTML. */
  statusPage(): string;
}

/**
 * Sent with every admin answer. The status page's drain buttons act with the browser's login: a page
 * on another site that frames it (transparent, under a decoy) would get real clicks on them, so no
 * admin answer may be framed (RFC 7034; CSP `frame-ancestors` for browsers that prefer it); nor may
 * a browser guess an answer's type past its `content-type`.
 */
const HARDENING: Readonly<Record<string, string>> = {
  'x-frame-options': 'DENY',
  'content-security-policy': "frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
};

function send(
  res: ServerResponse,
  status: number,
  type: string,
  body: string,
  extra: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...HARDENING,
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    ...extra,
  });
  res.end(body);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json', JSON.stringify(body, null, 2) + '\n', {
    'cache-control': 'no-store',
  });
}

function errorJson(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  extra: Record<string, string> = {},
): void {
  const body =
    JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code } }, null, 2) + '\n';
  send(res, status, 'application/json', body, extra);
}

const DRAIN_PATH = /^\/admin\/nodes\/([^/]+)\/([^/]+)\/(drain|undrain)$/;

/** The request target as a URL when it is a path (origin form, RFC 9112 §3.2.1); else null. */
function originFormUrl(target: string | undefined): URL | null {
  if (target === undefined || !target.startsWith('/') || target.startsWith('//')) return null;
  try {
    return new URL(target, 'http://admin.invalid');
  } catch {
    return null;
  }
}

/** The host part of a `Host` value (`[::1]:9901` → `::1`, `a.b:9901` → `a.b`). */
function hostName(host: string): string {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    return end < 0 ? host : host.slice(1, end);
  }
  const colon = host.indexOf(':');
  return (colon < 0 ? host : host.slice(0, colon)).toLowerCase();
}

/** True for a request without `Host` (HTTP/1.0 tools) or one addressed to an IP literal or localhost. */
function addressedByIpOrLocalhost(host: string | undefined): boolean {
  if (host === undefined || host === '') return true;
  const name = hostName(host.trim());
  return isIP(name) !== 0 || name === 'localhost' || name.endsWith('.localhost');
}

/** True when `origin` is absent (not a browser) or names the host the request was sent to. */
function sameOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (origin === undefined) return true;
  if (host === undefined) return false;
  try {
    return new URL(origin).host === host.trim().toLowerCase();
  } catch {
    return false;
  }
}

export class AdminServer {
  private readonly server: Server;
  private readonly target: AdminTarget;
  private readonly auth: AdminAuth;

  constructor(target: AdminTarget, auth: AdminAuth = new AdminAuth(undefined)) {
    this.target = target;
    this.auth = auth;
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.keepAliveTimeout = 5_000;
  }

  /** Binds; resolves with the bound port. */
  listen(address: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', (e) =>
        reject(new Error(`admin listener: cannot bind ${address}:${port}: ${e.message}`)),
      );
      this.server.listen(port, address, () => resolve((this.server.address() as AddressInfo).port));
    });
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    const url = originFormUrl(req.url);
    if (url === null)
      return errorJson(
        res,
        400,
        'invalid_request',
        'the admin API takes a request target that is a path (/metrics), not an absolute URL',
      );
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const read = method === 'GET' || method === 'HEAD';
    if (read && path === '/healthz') return send(res, 200, 'text/plain', 'ok\n');
    // Readiness says one word: probes and compose health checks may ask it by any name.
    const readiness = read && path === '/readyz';
    // Without a token, a page on another site whose name an attacker points at this address (DNS
    // rebinding) would read the config and drive reloads: such a listener answers only requests
    // addressed to an IP address or to localhost.
    if (!this.auth.required && !readiness && !addressedByIpOrLocalhost(req.headers.host))
      return errorJson(
        res,
        403,
        'admin_host_refused',
        `an admin listener without admin.token answers only requests to an IP address or localhost, not Host ${String(req.headers.host)}; set admin.token to reach it by name`,
      );
    // A browser logged in to the status page sends its Basic credentials with a form another site
    // posts here; it also says where the form came from.
    if (!read && !sameOrigin(req.headers.origin, req.headers.host))
      return errorJson(
        res,
        403,
        'admin_cross_origin',
        `admin ${method} requests from another origin (${String(req.headers.origin)}) are refused`,
      );
    if (!this.auth.check(req.headers.authorization)) {
      // Browsers answer a Basic challenge with a login prompt (the status page); tools send Bearer.
      const page = path === '/' || path === '/status';
      return errorJson(
        res,
        401,
        'admin_unauthorized',
        'this admin endpoint needs Authorization: Bearer <admin token>',
        {
          'www-authenticate': page
            ? 'Basic realm="sluice admin", charset="UTF-8"'
            : 'Bearer realm="sluice admin"',
        },
      );
    }
    if (read && path === '/readyz')
      return this.target.ready()
        ? send(res, 200, 'text/plain', 'ready\n')
        : send(res, 503, 'text/plain', 'not ready\n');
    if (read && (path === '/' || path === '/status'))
      return send(res, 200, 'text/html; charset=utf-8', this.target.statusPage(), {
        'cache-control': 'no-store',
      });
    if (!this.target.started())
      return errorJson(res, 503, 'starting', 'Sluice is starting; try again shortly');
    if (read && this.target.refresh !== undefined && REFRESHED_PATHS.has(path)) {
      // The worker threads' latest counts first, so that a read follows what was served.
      this.target.refresh().then(
        () => this.answer(res, url, path, method, read),
        (e: unknown) => errorJson(res, 500, 'internal_error', String(e)),
      );
      return;
    }
    this.answer(res, url, path, method, read);
  }

  /** Answers a request that passed the checks of `handle`. */
  private answer(res: ServerResponse, url: URL, path: string, method: string, read: boolean): void {
    try {
      if (read) {
        switch (path) {
          case '/metrics':
            return send(res, 200, 'text/plain; version=0.0.4; charset=utf-8', this.target.metricsText());
          case '/admin/config':
            return json(res, 200, this.target.configView());
          case '/admin/nodes':
            return json(res, 200, this.target.nodesView());
          case '/admin/stats':
            return json(res, 200, this.target.statsView(url.searchParams.get('detail') === 'series'));
          case '/admin/histograms':
            return json(res, 200, this.target.histogramsView(url.searchParams));
          case '/admin/capacity':
            if (this.target.capacityView === undefined) break;
            return json(res, 200, this.target.capacityView());
        }
      } else if (method === 'POST') {
        if (path === '/admin/reload') {
          this.target.reload().then(
            (r) => json(res, r.status, r.body),
            (e: unknown) => json(res, 500, { ok: false, errors: [String(e)] }),
          );
          return;
        }
        const m = DRAIN_PATH.exec(path);
        if (m !== null) {
          const r = this.target.drainNode(
            decodeURIComponent(m[1]!),
            decodeURIComponent(m[2]!),
            m[3] === 'drain',
          );
          return json(res, r.status, r.body);
        }
      }
    } catch (e) {
      if (e instanceof HistogramsQueryError) return errorJson(res, 400, 'invalid_query', e.message);
      // A malformed percent-escape in a pool or node name (decodeURIComponent).
      if (e instanceof URIError)
        return errorJson(res, 400, 'invalid_request', `${path}: malformed percent-escape in the path`);
      return errorJson(res, 500, 'internal_error', String(e));
    }
    errorJson(res, 404, 'not_found', `no admin endpoint ${method} ${path}`);
  }

  /** Stops accepting and closes idle connections. */
  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeIdleConnections();
    });
  }
}
