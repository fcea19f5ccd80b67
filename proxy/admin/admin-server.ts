/**
 * The admin listener (node:http, off the data path): liveness, readiness, Prometheus metrics, the
 * status page, stats and histograms, the active config, node counters and drain, the capacity
 * recommendation and reload. Bound to loopback by default; with `admin.token` every endpoint but
 * `/healthz` wants `Authorization: Bearer <token>` (or Basic with the token as password).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AdminAuth } from './admin-auth.js';
import { HistogramsQueryError } from './histograms-view.js';

/** The answer of a drain or undrain request. */
export interface DrainResult {
  status: number;
  body: unknown;
}

/** What the admin API reads and drives. */
export interface AdminTarget {
  /** True once the first plan serves and while not draining (`/readyz`). */
  ready(): boolean;
  /** False before the first plan exists: plan-dependent endpoints answer 503. */
  started(): boolean;
  metricsText(): string;
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

function send(
  res: ServerResponse,
  status: number,
  type: string,
  body: string,
  extra: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), ...extra });
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
    const url = new URL(req.url ?? '/', 'http://admin.invalid');
    const path = url.pathname;
    const method = req.method ?? 'GET';
    req.resume();
    const read = method === 'GET' || method === 'HEAD';
    if (read && path === '/healthz') return send(res, 200, 'text/plain', 'ok\n');
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
