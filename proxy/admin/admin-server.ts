/**
 * The admin listener (node:http, off the data path): liveness, readiness, Prometheus metrics, the
 * active config, node counters, the capacity recommendation and reload. Bound to loopback by
 * default; it has no authentication.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the admin API reads and drives. */
export interface AdminTarget {
  ready(): boolean;
  metricsText(): string;
  configView(): unknown;
  nodesView(): unknown;
  /** Per-pool capacity recommendation (`GET /admin/capacity`); absent: that path is a 404. */
  capacityView?(): unknown;
  reload(): Promise<{ ok: boolean; status: number; body: unknown }>;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json', JSON.stringify(body, null, 2) + '\n');
}

function notFound(res: ServerResponse, req: IncomingMessage): void {
  json(res, 404, {
    error: {
      message: `no admin endpoint ${req.method ?? ''} ${req.url ?? ''}`,
      type: 'invalid_request_error',
      param: null,
      code: 'not_found',
    },
  });
}

export class AdminServer {
  private readonly server: Server;
  private readonly target: AdminTarget;

  constructor(target: AdminTarget) {
    this.target = target;
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
    const path = (req.url ?? '/').split('?')[0];
    const method = req.method ?? 'GET';
    req.resume();
    if (method === 'GET' || method === 'HEAD') {
      switch (path) {
        case '/healthz':
          return send(res, 200, 'text/plain', 'ok\n');
        case '/readyz':
          return this.target.ready()
            ? send(res, 200, 'text/plain', 'ready\n')
            : send(res, 503, 'text/plain', 'not ready\n');
        case '/metrics':
          return send(res, 200, 'text/plain; version=0.0.4', this.target.metricsText());
        case '/admin/config':
          return json(res, 200, this.target.configView());
        case '/admin/nodes':
          return json(res, 200, this.target.nodesView());
        case '/admin/capacity':
          if (this.target.capacityView === undefined) break;
          return json(res, 200, this.target.capacityView());
      }
    } else if (method === 'POST' && path === '/admin/reload') {
      this.target.reload().then(
        (r) => json(res, r.status, r.body),
        (e: unknown) => json(res, 500, { ok: false, errors: [String(e)] }),
      );
      return;
    }
    notFound(res, req);
  }

  /** Stops accepting and closes idle connections. */
  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeIdleConnections();
    });
  }
}
