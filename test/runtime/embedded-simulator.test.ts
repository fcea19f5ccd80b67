/**
 * The embedded mode `npm start` runs: a config with a `simulator` section starts simulated nodes
 * inside the Sluice process, serves through them, and stops them with Sluice.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer } from 'node:net';
import { freePort } from '../../loadtest/env/free-port.js';
import { basicConfig, chatRequest, startTestSluice } from '../helpers/sluice.js';

/** True when something accepts connections on the loopback `port`. */
async function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** True when the loopback `port` can be bound now. */
async function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** The first of two consecutive free loopback ports (the simulator takes port, port + 1). */
async function twoFreePorts(): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const port = await freePort();
    if (port < 65535 && (await bindable(port + 1))) return port;
  }
  throw new Error('no two consecutive free ports');
}

describe('embedded simulator', () => {
  it('starts its nodes with Sluice, serves through them, and stops them on close', async () => {
    const port = await twoFreePorts();
    const urls = [`http://127.0.0.1:${port}`, `http://127.0.0.1:${port + 1}`];
    const t = await startTestSluice(
      basicConfig(urls, `simulator: { nodes: 2, port: ${port}, profile: fast }\n`, {
        route: '    route_header: true',
      }),
    );
    let closed = false;
    try {
      const served = new Set<string>();
      for (let i = 0; i < 2; i++) {
        const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest());
        assert.equal(r.status, 200);
        const body = (await r.json()) as { object: string };
        assert.equal(body.object, 'chat.completion');
        served.add(/node=(\S+);/.exec(r.headers.get('x-sluice-route') ?? '')?.[1] ?? '?');
      }
      assert.deepEqual([...served].sort(), [...urls].sort(), 'both embedded nodes answered');
      await t.close();
      closed = true;
      assert.deepEqual(
        [await listening(port), await listening(port + 1)],
        [false, false],
        'the nodes stopped with Sluice',
      );
    } finally {
      if (!closed) await t.close();
    }
  });
});
