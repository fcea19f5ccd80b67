/**
 * Batch job items as background work: they wait in admission behind interactive requests (lowest
 * class), and a refusal by Sluice itself (admission full) is waited out without spending one of
 * the item's attempts. Real Sluice, real simulated node, real admission controller.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

function config(node: string, admission: string, jobs: string): string {
  return basicConfig([node], `batch_api:\n  jobs: { ${jobs} }\n`, {
    pool: `    admission: { ${admission} }`,
  });
}

async function createBatch(url: string, inputs: string[]): Promise<string> {
  const lines = inputs.map((input, i) =>
    JSON.stringify({
      custom_id: `p-${i}`,
      method: 'POST',
      url: '/v1/embeddings',
      body: { model: 'e', input },
    }),
  );
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([lines.join('\n') + '\n']), 'p.jsonl');
  const file = (await (await fetch(`${url}/v1/files`, { method: 'POST', body: form })).json()) as {
    id: string;
  };
  const r = await fetch(`${url}/v1/batches`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
  });
  assert.equal(r.status, 200);
  return ((await r.json()) as { id: string }).id;
}

async function batch(
  url: string,
  id: string,
): Promise<{ status: string; request_counts: { completed: number; failed: number } }> {
  return (await (await fetch(`${url}/v1/batches/${id}`)).json()) as {
    status: string;
    request_counts: { completed: number; failed: number };
  };
}

function embed(url: string, input: string): Promise<Response> {
  return fetch(`${url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'e', input }),
  });
}

describe('batch jobs as background work', () => {
  let fleet: SimFleet;
  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });
  after(() => fleet?.close());

  it('lets an interactive request queued after a job item go first', async () => {
    const proxy: TestSluice = await startTestSluice(
      config(fleet.urls[0]!, 'max_in_flight_per_node: 1, max_queue: 16, max_wait_ms: 10000', 'poll_ms: 20'),
    );
    fleet.nodes[0]!.setFaults({ stall_ms: 250 });
    try {
      const queued = async (): Promise<number> => {
        const text = await (await fetch(`${proxy.adminUrl}/metrics`)).text();
        const m = /sluice_admission_queued\{pool="gpu"\} (\d+)/.exec(text);
        return Number(m?.[1] ?? 0);
      };
      const first = embed(proxy.url, 'occupies the only slot');
      await waitFor(() => proxy.sluice.stats.inFlight >= 1, 2000, 'the first request');
      const id = await createBatch(proxy.url, ['job item']);
      await waitFor(async () => (await queued()) >= 1, 5000, 'the job item to queue');
      const interactive = embed(proxy.url, 'arrives after the item');
      await waitFor(async () => (await queued()) >= 2, 5000, 'the interactive request to queue');
      assert.equal((await first).status, 200);
      const r = await interactive;
      assert.equal(r.status, 200);
      const when = await batch(proxy.url, id);
      assert.equal(when.request_counts.completed, 0, 'the job item was still waiting');
      await waitFor(async () => (await batch(proxy.url, id)).status === 'completed', 5000, 'the batch');
    } finally {
      fleet.nodes[0]!.setFaults({ stall_ms: 0 });
      await proxy.close();
    }
  });

  it('waits out admission refusals without spending the item’s single attempt', async () => {
    const proxy = await startTestSluice(
      config(
        fleet.urls[0]!,
        'max_in_flight_per_node: 1, max_queue: 0',
        'poll_ms: 20, max_attempts: 1, concurrency: 4',
      ),
    );
    fleet.nodes[0]!.setFaults({ stall_ms: 100 });
    try {
      // Four items at once on a pool that admits one and queues none: three are refused each round.
      const id = await createBatch(proxy.url, ['a', 'b', 'c', 'd']);
      await waitFor(async () => (await batch(proxy.url, id)).status === 'completed', 10_000, 'the batch');
      const done = await batch(proxy.url, id);
      assert.deepEqual(done.request_counts, { total: 4, completed: 4, failed: 0 });
      assert.ok(proxy.sluice.batch!.executor.stats.deferred >= 3, 'refusals happened and were waited out');
    } finally {
      fleet.nodes[0]!.setFaults({ stall_ms: 0 });
      await proxy.close();
    }
  });
});
