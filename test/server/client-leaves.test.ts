/**
 * A client that closes its connection before its answer started gives up its request on both
 * listener engines: a request waiting for the node's answer is aborted upstream, one waiting in
 * admission leaves the queue and never reaches a node. On Sluice's own engine, where a client's
 * half-close (FIN) is all there is to see until something is written, an answer already being
 * streamed goes on to a client that only half-closed.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

/** How long the node holds a request's head: far longer than the checks below wait. */
const STALL_MS = 4000;

function chatRequest(headers: Record<string, string>, extra: Record<string, unknown> = {}): string {
  const body = JSON.stringify({
    model: 'sim-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 2,
    ...extra,
  });
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  return (
    `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\n` +
    `${lines.join('')}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/** The value of an unlabelled-but-for-pool gauge on /metrics. */
async function gauge(t: TestSluice, line: string): Promise<number> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const m = text.split('\n').find((l) => l.startsWith(`${line} `));
  assert.ok(m !== undefined, `no ${line} on /metrics`);
  return Number(m.slice(line.length + 1));
}

describe('a client that leaves', { timeout: 60_000 }, () => {
  let fleet: SimFleet;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
  });

  after(async () => {
    await fleet?.close();
  });

  for (const engine of ENGINES) {
    describe(`${engine.name} listener`, () => {
      let t: TestSluice | null = null;
      const open: RawConnection[] = [];
      before(async () => {
        t = await startTestSluice(
          withListenerKeys(
            basicConfig([fleet.urls[0]!], '', {
              pool: '    admission: { max_in_flight_per_node: 1, max_queue: 4, max_wait_ms: 10000 }',
            }),
            { pipelining: engine.pipelining },
          ),
        );
      });
      after(async () => {
        for (const c of open) c.destroy();
        await t?.close();
      });

      it('aborts the request upstream when the client closes before the answer', async () => {
        const c = await RawConnection.open(t!.url);
        open.push(c);
        await c.write(chatRequest({ 'x-sim-stall-ms': String(STALL_MS) }));
        await waitFor(() => t!.sluice.stats.inFlight === 1, 3000, 'the request to be in flight');
        c.destroy();
        await waitFor(() => t!.sluice.stats.inFlight === 0, 2000, 'the request to be given up');
        const member = t!.sluice.current.pools.get('gpu')!.members[0]!;
        assert.equal(member.node.inFlight, 0, 'the node is still counted busy');
      });

      it('takes a queued request out of the queue when its client closes; it never reaches a node', async () => {
        const node = fleet.nodes[0]!;
        const served = node.stats().served;
        const holder = await RawConnection.open(t!.url);
        open.push(holder);
        await holder.write(chatRequest({ 'x-sim-stall-ms': String(STALL_MS) }));
        await waitFor(() => t!.sluice.stats.inFlight === 1, 3000, 'the first request to hold the node');
        const queued = await RawConnection.open(t!.url);
        open.push(queued);
        await queued.write(chatRequest({}));
        await waitFor(() => t!.sluice.stats.inFlight === 2, 3000, 'the second request to queue');
        assert.equal(await gauge(t!, 'sluice_admission_queued{pool="gpu"}'), 1);
        queued.destroy();
        await waitFor(() => t!.sluice.stats.inFlight === 1, 2000, 'the queued request to be given up');
        assert.equal(await gauge(t!, 'sluice_admission_queued{pool="gpu"}'), 0);
        const answer = await holder.readResponse(STALL_MS + 5000);
        assert.equal(answer.status, 200);
        await waitFor(() => t!.sluice.stats.inFlight === 0, 2000, 'the first request to finish');
        assert.equal(node.stats().served - served, 1, 'the request of the client that left was served');
      });

      if (engine.name === 'net') {
        it('streams on to a client that only half-closed after its answer started', async () => {
          const c = await RawConnection.open(t!.url);
          open.push(c);
          await c.write(chatRequest({ 'x-sim-chunk-delay-ms': '40' }, { stream: true, max_tokens: 12 }));
          await c.waitForText('data: ', 5000);
          c.socket.end();
          const r = await c.readResponse(5000);
          assert.equal(r.status, 200);
          assert.match(r.body.toString(), /data: \[DONE\]/);
          assert.ok(await c.waitClosed(2000), 'the connection was kept after the half-closed exchange');
        });
      }
    });
  }
});
