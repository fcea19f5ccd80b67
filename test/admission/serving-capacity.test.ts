/**
 * Admission capacity counts the pool's nodes that serve: with one of two nodes drained, the other
 * gets `max_in_flight_per_node` requests and the rest wait in the queue; undrained, the waiting
 * ones go to it at once; with no node serving, requests are not held in the queue but answered
 * (no node) at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { basicConfig, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';

/** A node that holds every request until `release()`, counting those it holds. */
interface HoldingNode extends ScriptedNode {
  readonly held: ServerResponse[];
  release(): void;
}

async function startHoldingNode(): Promise<HoldingNode> {
  const held: ServerResponse[] = [];
  const node = await startScriptedNode((req, res) => {
    req.resume();
    req.on('end', () => held.push(res));
  });
  return {
    ...node,
    held,
    release() {
      for (const res of held.splice(0)) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"id":"x","object":"chat.completion","choices":[]}');
      }
    },
  };
}

describe('admission capacity follows the nodes serving', { timeout: 30_000 }, () => {
  let a: HoldingNode | undefined;
  let b: HoldingNode | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    a = await startHoldingNode();
    b = await startHoldingNode();
    t = await startTestSluice(
      basicConfig([a.url, b.url], '', {
        pool: [
          '    balance: { kind: least-request }',
          '    admission: { max_in_flight_per_node: 2, max_queue: 16, max_wait_ms: 10000 }',
        ].join('\n'),
      }),
    );
  });

  after(async () => {
    a?.release();
    b?.release();
    await t?.close();
    await a?.close();
    await b?.close();
  });

  const admin = async (path: string): Promise<void> => {
    const r = await fetch(`${t!.adminUrl}${path}`, { method: 'POST' });
    assert.equal(r.status, 200, await r.text());
  };

  it('queues beyond the per-node limit of the node left serving, and admits the queue when the other returns', async () => {
    await admin(`/admin/nodes/gpu/0/drain`);
    const answers = Array.from({ length: 4 }, () => fetch(`${t!.url}/v1/chat/completions`, chatRequest()));
    try {
      await waitFor(() => b!.held.length >= 2, 5000, 'two requests on the serving node');
      // Counting the drained node too, all four would be admitted and sent to the serving one.
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(b!.held.length, 2);
      assert.equal(a!.held.length, 0);
      await admin(`/admin/nodes/gpu/0/undrain`);
      await waitFor(() => a!.held.length === 2, 5000, 'the queued requests on the returned node');
      assert.equal(b!.held.length, 2);
    } finally {
      await admin(`/admin/nodes/gpu/0/undrain`);
      a!.release();
      b!.release();
    }
    const statuses = await Promise.all(answers.map(async (p) => (await p).status));
    assert.deepEqual(statuses, [200, 200, 200, 200]);
  });

  it('does not hold requests in the queue while no node serves', async () => {
    await admin(`/admin/nodes/gpu/0/drain`);
    await admin(`/admin/nodes/gpu/1/drain`);
    try {
      const started = Date.now();
      const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
      assert.equal(r.status, 503);
      await r.text();
      assert.ok(Date.now() - started < 5000, `answered after ${Date.now() - started} ms`);
    } finally {
      await admin(`/admin/nodes/gpu/0/undrain`);
      await admin(`/admin/nodes/gpu/1/undrain`);
    }
  });
});
