/**
 * Broken nodes, table-driven (the table is `loadtest/chaos/fault-table.ts`, shared with `npm run
 * chaos`): a raw `node:net` node that resets, stalls, breaks its framing, sends a bad chunk, a
 * short body, malformed SSE or dies mid-stream. For every case the client gets a clean error (a
 * 502/504 before any byte, an SSE error event or a cut body after), the broken upstream connection
 * is never used again, concurrent clients of the same node are unaffected, and every in-flight
 * count, admission slot, concurrency slot and token reservation is back to zero on /metrics and
 * /admin/nodes. With every node down: 503 + Retry-After at once, nothing queued.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { refusedPorts } from '../helpers/refused-port.js';
import { BrokenNode } from '../../loadtest/chaos/broken-node.js';
import {
  FAULT_CASES,
  FAULT_TABLE_KEY,
  baselineProblem,
  faultTableConfig,
  nodeViews,
  noNodeLatency,
  runFaultCase,
  sendChat,
  watchedGauges,
} from '../../loadtest/chaos/fault-table.js';
import { LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

process.env['BROKEN_NODES_KEY'] = FAULT_TABLE_KEY;

// The table runs against both upstream clients (`upstream_client`): Sluice's own, the default, and
// undici's, kept as the fallback; a node's fault must end the same way whichever carries it.
for (const client of ['sluice', 'undici'] as const) {
  describe(`broken nodes, ${client} upstream client`, { timeout: 180_000 }, () => {
    let node: BrokenNode | null = null;
    let t: TestSluice | null = null;

    before(async () => {
      node = await BrokenNode.start();
      const pool =
        client === 'sluice'
          ? ''
          : '    health: { outlier: { consecutive_failures: 0 } }\n    upstream_client: undici\n';
      t = await startTestSluice(faultTableConfig(LOOPBACK_HEAD, [node.url], pool));
    });

    after(async () => {
      await t?.close();
      await node?.close();
    });

    for (const c of FAULT_CASES) {
      const outcome = c.expect.kind === 'status' ? `${c.expect.status} ${c.expect.code}` : c.expect.kind;
      it(`${c.fault}${c.stream ? ' (stream)' : ''}: the client gets ${outcome}, the connection is dropped, others are unaffected and every counter returns`, async () => {
        assert.deepEqual(await runFaultCase(t!, node!, c), []);
      });
    }
  });
}

describe('broken nodes', { timeout: 180_000 }, () => {
  it('answers 503 with Retry-After within 10 ms when every node is down, without queueing', async (tc) => {
    const dead = (await refusedPorts(2)).map((p) => `http://127.0.0.1:${p}`);
    const d = await startTestSluice(
      faultTableConfig(
        LOOPBACK_HEAD,
        dead,
        '    health: { active: { path: /health, interval_ms: 100, timeout_ms: 100, unhealthy_threshold: 1, healthy_threshold: 1 } }\n',
      ),
    );
    try {
      await waitFor(async () => (await nodeViews(d)).every((n) => !n.available), 5000, 'both nodes down');
      const burst = await Promise.all(Array.from({ length: 50 }, () => sendChat(d, '', false)));
      assert.deepEqual(
        burst.map((r) => r.status),
        Array(50).fill(503),
      );
      const r = await noNodeLatency(d, 100);
      tc.diagnostic(
        `503 with every node down: median ${r.medianMs.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms`,
      );
      assert.deepEqual(r.problems, []);
      assert.ok(r.medianMs < 10, `median time to the 503: ${r.medianMs.toFixed(2)} ms`);
      assert.equal((await watchedGauges(d)).get('sluice_admission_queued{pool="gpu"}'), 0);
      const metrics = await (await fetch(`${d.adminUrl}/metrics`)).text();
      assert.match(
        metrics,
        /sluice_admission_total\{pool="gpu",outcome="queued"\} 0\n/,
        'nothing was queued',
      );
      assert.equal(await baselineProblem(d, 'all nodes down'), null);
    } finally {
      await d.close();
    }
  });
});
