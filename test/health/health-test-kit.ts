/**
 * Shared helpers of the health tests: a manual clock, nodes that never dispatch, an event recorder,
 * a polling wait with a deadline and a tiny counting HTTP server. Test support only.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { HealthEvent, HealthEventKind } from '../../proxy/health/health-options.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

export { ManualClock } from '../helpers/manual-clock.js';

/** Collects health events; `kinds()` lists them as `kind node-index` strings. */
export class EventLog {
  readonly events: HealthEvent[] = [];
  readonly onEvent = (e: HealthEvent): void => {
    this.events.push(e);
  };
  /** Events of one kind. */
  of(kind: HealthEventKind): HealthEvent[] {
    return this.events.filter((e) => e.kind === kind);
  }
}

/** Nodes created by `idleNodes`, closed by `closeNodes`. */
const created: UpstreamNode[] = [];

/**
 * `n` nodes on loopback ports nothing listens on. They are never dispatched to (passive signals are
 * fed by hand), so they open no connection.
 */
export function idleNodes(n: number): UpstreamNode[] {
  const out: UpstreamNode[] = [];
  for (let i = 0; i < n; i++) {
    const node = new UpstreamNode(`http://127.0.0.1:${1 + created.length}`, {
      connections: 1,
      connectTimeoutMs: 500,
    });
    created.push(node);
    out.push(node);
  }
  return out;
}

/** A node for a live URL (a simulated node or a test server). */
export function liveNode(url: string): UpstreamNode {
  const node = new UpstreamNode(url, { connections: 1, connectTimeoutMs: 500 });
  created.push(node);
  return node;
}

/** Closes every node made by `idleNodes` / `liveNode`. */
export async function closeNodes(): Promise<void> {
  await Promise.all(created.splice(0).map((n) => n.close()));
}

/** Polls `check` every 5 ms until it holds; rejects after `timeoutMs`. */
export async function waitFor(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A loopback HTTP server that counts requests per path and answers with `handler`. */
export interface CountingServer {
  url: string;
  hits: Map<string, number>;
  count(path: string): number;
  close(): Promise<void>;
}

/** Starts a counting server; by default it answers 200 with an empty body. */
export async function startCountingServer(
  handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end(),
): Promise<CountingServer> {
  const hits = new Map<string, number>();
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    count: (path) => hits.get(path) ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
