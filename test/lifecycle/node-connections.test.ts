/**
 * The connection pool never throttles a node silently: with the shipped defaults, 300 concurrent
 * requests are all in flight at one node at once (no cap of 128), and with an explicit
 * `connections_per_node` a node whose connections are all busy takes no more (the request is
 * answered at once instead of waiting inside the pool, unseen).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

/** A node that holds every request until `release()`, counting how many it holds at once. */
class HoldingNode {
  readonly server: Server;
  held: ServerResponse[] = [];
  peak = 0;
  constructor() {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        this.held.push(res);
        this.peak = Math.max(this.peak, this.held.length);
      });
    });
    this.server.maxHeadersCount = 0;
  }
  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  release(): void {
    for (const res of this.held.splice(0)) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"choices":[]}');
    }
  }
}

describe('connections to a node', { timeout: 60_000 }, () => {
  let node: HoldingNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    node = new HoldingNode();
    await new Promise<void>((resolve) => node!.server.listen(0, '127.0.0.1', 1024, resolve));
  });

  after(async () => {
    await t?.close();
    node?.release();
    node?.server.closeAllConnections();
    if (node !== undefined) await new Promise<void>((resolve) => node!.server.close(() => resolve()));
  });

  it('lets 300 concurrent requests reach one node at once with the shipped defaults', async () => {
    t = await startTestSluice(basicConfig([node!.url]));
    const pending = Array.from({ length: 300 }, () =>
      // fetch's own connection pool has no cap either.
      fetch(`${t!.url}/v1/chat/completions`, chatRequest({})),
    );
    await waitFor(() => node!.held.length === 300, 20_000, 'all 300 requests at the node');
    node!.release();
    const statuses = await Promise.all(pending.map(async (p) => (await p).status));
    assert.deepEqual(new Set(statuses), new Set([200]));
    assert.equal(node!.peak, 300);
    await t.close();
    t = undefined;
  });

  it('answers at once, instead of queueing in the pool, when an explicit cap is reached', async () => {
    t = await startTestSluice(basicConfig([node!.url], '', { pool: '    connections_per_node: 2' }));
    const first = [0, 1].map(() => fetch(`${t!.url}/v1/chat/completions`, chatRequest({})));
    await waitFor(() => node!.held.length === 2, 10_000, 'two requests at the node');
    const third = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}));
    assert.equal(third.status, 503);
    assert.ok(third.headers.get('retry-after') !== null);
    assert.equal(((await third.json()) as { error: { code: string } }).error.code, 'no_healthy_upstream');
    assert.equal(node!.held.length, 2, 'nothing waits for a connection');
    node!.release();
    for (const r of await Promise.all(first)) assert.equal(r.status, 200);
  });
});
