/**
 * Hedging on the first token: inference servers send a stream's head before its prefill, so a
 * stream stuck in a prefill queue has its head and no token. Such a stream must be hedged like one
 * with no head at all, the first attempt to produce an event must win, and nothing of the loser
 * (not its head, not its keep-alive comments) may reach the client. The delay for streams comes
 * from recent times to first token, not head times. Real Sluice in process, two loopback nodes
 * whose timing each test sets.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basicConfig, findNode, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN, probeTrace } from '../plugin/plugin-helpers.js';

/**
 * How a node answers a stream: delays of its head and of its first event after the head, ms; with
 * `status`, an error answer of that status at once instead.
 */
interface Timing {
  headMs: number;
  tokenMs: number;
  status?: number;
}

/** A node that streams `: ping-NAME`, then `content: from-NAME` after its timing, then [DONE]. */
class TimedNode {
  readonly name: string;
  timing: Timing = { headMs: 0, tokenMs: 0 };
  /** Streams whose client went away before the end (a cancelled attempt). */
  aborted = 0;
  private server: Server | null = null;
  url = '';

  constructor(name: string) {
    this.name = name;
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const { headMs, tokenMs, status } = this.timing;
        if (status !== undefined) {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(`{"error":{"message":"failed on ${this.name}","type":"server_error","code":null}}`);
          return;
        }
        let done = false;
        const timers: NodeJS.Timeout[] = [];
        res.on('close', () => {
          if (!done) this.aborted++;
          for (const t of timers) clearTimeout(t);
        });
        timers.push(
          setTimeout(() => {
            res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
            res.write(`: ping-${this.name}\n\n`);
            timers.push(
              setTimeout(() => {
                done = true;
                res.write(`data: {"choices":[{"delta":{"content":"from-${this.name}"}}]}\n\n`);
                res.end('data: [DONE]\n\n');
              }, tokenMs),
            );
          }, headMs),
        );
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

interface Answer {
  status: number;
  route: string;
  body: string;
  /** The request id, and the `x-probe` header a route plugin set ('' without one). */
  id: string;
  probe: string;
}

async function stream(t: TestSluice): Promise<Answer> {
  const r = await fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return {
    status: r.status,
    route: r.headers.get('x-sluice-route') ?? '',
    body: await r.text(),
    id: r.headers.get('x-request-id') ?? '',
    probe: r.headers.get('x-probe') ?? '',
  };
}

/** Hedged attempts the pool has sent so far, from the metrics. */
async function hedges(t: TestSluice): Promise<number> {
  const metrics = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const m = /sluice_pool_hedges_total\{pool="gpu"\} (\d+)/.exec(metrics);
  assert.ok(m !== null, 'the hedge counter is exported');
  return Number(m[1]);
}

describe('hedging on the first token of a stream', { timeout: 60_000 }, () => {
  const a = new TimedNode('A');
  const b = new TimedNode('B');
  let t: TestSluice | undefined;

  before(async () => {
    await a.start();
    await b.start();
  });

  afterEach(async () => {
    await t?.close();
    t = undefined;
    a.timing = { headMs: 0, tokenMs: 0 };
    b.timing = { headMs: 0, tokenMs: 0 };
  });

  after(async () => {
    await a.close();
    await b.close();
  });

  /** A Sluice hedging at the p95 of recent samples, after 5 warm-up streams; `plugins`: the probe on the route. */
  async function start(plugins = false): Promise<TestSluice> {
    const s = await startTestSluice(
      basicConfig(
        [a.url, b.url],
        plugins
          ? `plugins:\n  - name: probe\n    use: ${PROBE_PLUGIN}\n    options: { label: hedged, chunks: true }\n`
          : '',
        {
          pool: '    hedge: { min_samples: 5, min_delay_ms: 10, budget_percent: 100, percentile: 95 }',
          route: `    route_header: true${plugins ? '\n    plugins: [probe]' : ''}`,
        },
      ),
    );
    for (let i = 0; i < 10; i++) assert.equal((await stream(s)).status, 200);
    return s;
  }

  /** Sends 4 streams at once to a pool where A is slow: the ones that went to A first are hedged to B. */
  async function assertHedgedToB(s: TestSluice): Promise<Answer[]> {
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: 4 }, () => stream(s)));
    const ms = performance.now() - started;
    assert.ok(ms < 2000, `hedged streams took ${ms.toFixed(0)} ms; node A's delay is 5000`);
    const hedged = answers.filter((x) => x.route.includes('hedge'));
    assert.ok(hedged.length >= 1, 'round-robin started some of the streams on A');
    for (const x of answers) {
      assert.equal(x.status, 200);
      assert.match(x.route, new RegExp(`node=${b.url}`), 'every answer is B’s');
      assert.match(x.body, /from-B/);
      assert.match(x.body, /data: \[DONE\]/);
      assert.doesNotMatch(x.body, /A/, 'nothing of the losing attempt reaches the client');
    }
    // The losers on A are cancelled, not left to run out their delay.
    await waitFor(() => findNode(s, a.url)!.inFlight === 0, 1500, 'the attempts on A to be cancelled');
    const metrics = await (await fetch(`${s.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_pool_hedge_wins_total\{pool="gpu"\} [1-9]/);
    return answers;
  }

  it('hedges a stream whose head came at once but whose first token did not', async () => {
    t = await start();
    a.timing = { headMs: 0, tokenMs: 5000 };
    await assertHedgedToB(t);
  });

  it('hedges a stream whose first token does not come within the hedge delay because its head does not', async () => {
    t = await start();
    a.timing = { headMs: 5000, tokenMs: 0 };
    await assertHedgedToB(t);
  });

  it('sends the winner of a hedged stream through the route plugins, once, and nothing of the loser', async () => {
    t = await start(true);
    a.timing = { headMs: 0, tokenMs: 5000 };
    const answers = await assertHedgedToB(t);
    for (const x of answers) {
      assert.equal(x.probe, 'hedged', 'the plugin saw the winner’s head');
      const phases = probeTrace().get(x.id) ?? [];
      assert.equal(phases.filter((p) => p === 'probe:onResponseHead').length, 1, phases.join(' '));
      assert.ok(phases.includes('probe:onResponseChunk'), 'the events went through the chunk hook');
    }
  });

  it('takes the delay from recent times to first token, so a stream as fast as those is not hedged', async () => {
    // Warm-up streams have their head at once and their first event after 150 ms: a delay taken
    // from head times would hedge every stream; the first-token delay hedges none of the 100 ms ones.
    a.timing = b.timing = { headMs: 0, tokenMs: 150 };
    t = await start();
    const hedgesBefore = await hedges(t);
    a.timing = b.timing = { headMs: 0, tokenMs: 100 };
    const answers = await Promise.all(Array.from({ length: 4 }, () => stream(t!)));
    for (const x of answers) {
      assert.equal(x.status, 200);
      assert.doesNotMatch(x.route, /hedge/);
      // The keep-alive comment held back until the first event still reaches the client, in order.
      assert.match(x.body, /^: ping-(A|B)\n\ndata: .*from-\1/);
    }
    assert.equal(await hedges(t), hedgesBefore);
  });

  it('counts every attempt of the request in x-sluice-route when the original wins after a failed hedge', async () => {
    t = await start();
    a.timing = { headMs: 0, tokenMs: 300 };
    b.timing = { headMs: 0, tokenMs: 0, status: 500 };
    // Round-robin: one stream starts on A and is hedged to B, which fails; the other starts on B,
    // fails and is retried on A. Either way A answers, after two attempts.
    for (let i = 0; i < 2; i++) {
      const x = await stream(t);
      assert.equal(x.status, 200, x.body);
      assert.match(x.body, /from-A/);
      assert.match(x.route, new RegExp(`node=${a.url}; attempt=2;`));
    }
  });

  it('forwards a held stream at the hedge delay when no hedge can be sent', async () => {
    t = await start();
    // Only A is left: the hedge has no node, so A's head and comment go out without waiting for its event.
    findNode(t, b.url)!.available = false;
    a.timing = { headMs: 0, tokenMs: 1500 };
    const started = performance.now();
    const r = await fetch(`${t.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const headAfter = performance.now() - started;
    assert.equal(r.status, 200);
    assert.ok(headAfter < 1000, `head forwarded after ${headAfter.toFixed(0)} ms; the event comes at 1500`);
    assert.match(await r.text(), /^: ping-A\n\ndata: .*from-A/);
  });
});
