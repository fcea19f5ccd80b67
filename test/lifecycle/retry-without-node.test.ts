/**
 * A retryable answer that was dropped for a retry, when no node can take that retry after all (the
 * other node was drained during the Retry-After wait, or a hedge already used it): the client gets
 * the node's own answer (status, Retry-After and body), no retry is counted and the retry budget
 * keeps its token.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { LOOPBACK_HEAD, chatRequest, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const NODE_BODY = '{"error":{"message":"node busy","type":"busy","code":"busy"}}';

/** How the scripted nodes answer a chat request. */
type Mode = 'ok' | 'busy' | 'busy-ra' | 'held' | 'held-trickle';

describe('a retry that finds no node', { timeout: 60_000 }, () => {
  const nodes: ScriptedNode[] = [];
  const received = [0, 0, 0];
  let mode: Mode = 'ok';
  let status = 503;
  /** Answers waiting for the other node's request ('held' modes), and answers left open. */
  let waiting: ServerResponse[] = [];
  const open = new Set<ServerResponse>();
  let t: TestSluice | null = null;

  function answer(i: number, req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    if (req.url !== '/v1/chat/completions') {
      res.end();
      return;
    }
    received[i]!++;
    open.add(res);
    res.on('close', () => open.delete(res));
    if (mode === 'ok') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"id":"ok","object":"chat.completion","choices":[]}');
      return;
    }
    if (mode === 'busy' || mode === 'busy-ra') {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (mode === 'busy-ra') headers['retry-after'] = '1';
      res.writeHead(status, headers);
      res.end(NODE_BODY);
      return;
    }
    // Both attempts (the first and its hedge) answer at the same moment, once both were sent, so
    // each answer's head comes while the other attempt still runs.
    waiting.push(res);
    if (waiting.length < 2) return;
    const both = waiting;
    waiting = [];
    for (const r of both) {
      r.writeHead(500, { 'content-type': 'application/json' });
      r.write(NODE_BODY.slice(0, 10));
    }
    if (mode === 'held') setTimeout(() => both.forEach((r) => r.end(NODE_BODY.slice(10))), 30);
    // 'held-trickle': the bodies never end; Sluice cuts them.
  }

  function config(pool: string, route: string): string {
    return `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${nodes.map((n) => `      - url: ${n.url}`).join('\n')}
    health: { outlier: { consecutive_failures: 0 } }
${pool}
routes:
  - name: all
    match: {}
    pool: gpu
${route}
`;
  }

  async function metric(name: string): Promise<number> {
    const text = await (await fetch(`${t!.adminUrl}/metrics`)).text();
    const m = new RegExp(`^${name}\\{pool="gpu"\\} (\\d+)`, 'm').exec(text);
    assert.ok(m, `${name} not found`);
    return Number(m[1]);
  }

  async function drain(i: number, verb: 'drain' | 'undrain'): Promise<void> {
    const r = await fetch(`${t!.adminUrl}/admin/nodes/gpu/${i}/${verb}`, { method: 'POST' });
    assert.equal(r.status, 200, await r.text());
  }

  const total = (): number => received[0]! + received[1]! + received[2]!;

  before(async () => {
    for (let i = 0; i < 3; i++) nodes.push(await startScriptedNode((req, res) => answer(i, req, res)));
  });

  afterEach(async () => {
    for (const res of open) res.destroy();
    waiting = [];
    await t?.close();
    t = null;
  });

  after(async () => {
    for (const n of nodes) await n.close();
  });

  for (const code of [503, 429]) {
    it(`passes on the node's ${code}, its Retry-After and body when the other nodes were drained during the wait`, async () => {
      t = await startTestSluice(
        config(
          '    retry_budget: { percent: 100, min_per_second: 0 }',
          '    retries: { max: 2, on: [5xx, 429], base_backoff_ms: 1, max_backoff_ms: 2 }',
        ),
      );
      mode = 'busy-ra';
      status = code;
      const seen = [...received];
      const before = total();
      const pending = fetch(`${t.url}/v1/chat/completions`, chatRequest());
      await waitFor(() => total() > before, 5000, 'the first attempt');
      // The node answers at once; Sluice waits its Retry-After (1 s) before the retry.
      for (let i = 0; i < 3; i++) if (received[i] === seen[i]) await drain(i, 'drain');
      const r = await pending;
      assert.equal(r.status, code);
      assert.equal(r.headers.get('retry-after'), '1');
      assert.equal(await r.text(), NODE_BODY);
      assert.equal(total() - before, 1, 'one node was asked');
      assert.equal(await metric('sluice_pool_retries_total'), 0);

      // The token the dropped answer took for its retry was given back: with the nodes back, the
      // next request (depositing one more) can retry twice.
      for (let i = 0; i < 3; i++) await drain(i, 'undrain');
      mode = 'busy';
      const next = total();
      const r2 = await fetch(`${t.url}/v1/chat/completions`, chatRequest());
      assert.equal(r2.status, code);
      assert.equal(total() - next, 3, 'the second request was tried on all three nodes');
      assert.equal(await metric('sluice_pool_retries_total'), 2);
      assert.equal(await metric('sluice_pool_retry_budget_refused_total'), 0);
    });
  }

  for (const held of ['held', 'held-trickle'] as const) {
    it(
      held === 'held'
        ? "passes on the last node's whole 500 when a hedge and its original both failed"
        : "keeps the node's 500 when a hedge and its original both failed with bodies too slow to read",
      async () => {
        // Two nodes: the hedge goes to the only other one.
        const two = nodes.slice(0, 2);
        t = await startTestSluice(
          `${LOOPBACK_HEAD}pools:
  - name: gpu
    nodes:
${two.map((n) => `      - url: ${n.url}`).join('\n')}
    health: { outlier: { consecutive_failures: 0 } }
    hedge: { percentile: 50, min_delay_ms: 50, budget_percent: 100, min_samples: 5 }
    retry_budget: { percent: 100, min_per_second: 0 }
routes:
  - name: all
    match: {}
    pool: gpu
`,
        );
        mode = 'ok';
        for (let i = 0; i < 10; i++)
          assert.equal((await fetch(`${t.url}/v1/chat/completions`, chatRequest())).status, 200);
        mode = held;
        const before = total();
        const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest());
        const text = await r.text();
        assert.equal(r.status, 500, text);
        if (held === 'held') assert.equal(text, NODE_BODY);
        else {
          const body = JSON.parse(text) as { error: { message: string; code: string } };
          assert.equal(body.error.code, 'upstream_error');
          assert.match(body.error.message, /answered 500/);
        }
        assert.equal(total() - before, 2, 'the original and its hedge, no retry');
        assert.equal(await metric('sluice_pool_retries_total'), 0);
        assert.equal(await metric('sluice_pool_retry_budget_refused_total'), 0);
      },
    );
  }
});
