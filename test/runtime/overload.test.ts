/**
 * Overload of Sluice itself: with the event loop starved (this process busy-waits in a timer), new
 * requests get 503 `proxy_overloaded` with Retry-After at once and never reach a node; shedding
 * lasts at least `min_shed_ms` and stops once the loop recovers; one long pause is not overload;
 * the heap signal works and a reload can turn protection off. Counted on /metrics.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { BrokenNode } from '../../loadtest/chaos/broken-node.js';
import { RawConnection, rawHeader } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

function overloadConfig(url: string, overload: string): string {
  return basicConfig([url], `server:\n  overload: { ${overload} }\n`);
}

const BODY = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}';
const REQUEST = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`;

/** Blocks this process's event loop for `ms`. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

async function metric(t: TestSluice, series: string): Promise<number> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

describe('overload of Sluice itself', { timeout: 120_000 }, () => {
  let node: BrokenNode | null = null;

  before(async () => {
    node = await BrokenNode.start();
  });

  after(async () => {
    await node?.close();
  });

  it('sheds new requests with 503 and Retry-After while the event loop is starved, then takes them again', async () => {
    const t = await startTestSluice(
      overloadConfig(
        node!.url,
        'event_loop_delay_ms: 40, heap_used_percent: 0, sample_interval_ms: 100, min_shed_ms: 600, retry_after_ms: 2000',
      ),
    );
    const conn = await RawConnection.open(t.url);
    let starver: NodeJS.Timeout | null = null;
    try {
      await conn.write(REQUEST);
      assert.equal((await conn.readResponse()).status, 200);
      starver = setInterval(busy, 5, 90);
      await waitFor(() => t.sluice.overload?.shedding === true, 10_000, 'shedding to start');
      const enteredAt = performance.now();
      const seenByNode = node!.requests.length;
      for (let i = 0; i < 3; i++) {
        // Requests with a body on one keep-alive connection: the body is skipped, the connection kept.
        await conn.write(REQUEST);
        const r = await conn.readResponse(10_000);
        assert.equal(r.status, 503);
        assert.equal(rawHeader(r, 'retry-after'), '2');
        assert.equal(rawHeader(r, 'retry-after-ms'), '2000');
        const body = JSON.parse(r.body.toString()) as { error: { code: string; message: string } };
        assert.equal(body.error.code, 'proxy_overloaded');
        assert.match(body.error.message, /event-loop delay \d+ ms, threshold 40 ms/);
      }
      assert.equal(conn.closed, false, 'the connection stays open');
      assert.equal(node!.requests.length, seenByNode, 'no shed request reached the node');
      clearInterval(starver);
      starver = null;
      await waitFor(() => t.sluice.overload?.shedding === false, 10_000, 'shedding to stop');
      const shedMs = performance.now() - enteredAt;
      assert.ok(shedMs >= 600 - 150, `shedding lasted at least min_shed_ms (${shedMs.toFixed(0)} ms)`);
      await conn.write(REQUEST);
      assert.equal((await conn.readResponse()).status, 200, 'requests are taken again');
      assert.ok((await metric(t, 'sluice_overload_shed_total')) >= 3);
      assert.equal(await metric(t, 'sluice_overload_episodes_total'), 1);
      assert.equal(await metric(t, 'sluice_overload_shedding'), 0);
      assert.ok((await metric(t, 'sluice_downstream_rejected_total{code="SLUICE_SERVER_OVERLOADED"}')) >= 3);
      assert.ok((await metric(t, 'sluice_refused_total{reason="proxy_overloaded",status="503"}')) >= 3);
      assert.ok(t.logs.some((l) => l.includes('overload: shedding new requests')));
    } finally {
      if (starver !== null) clearInterval(starver);
      conn.destroy();
      await t.close();
    }
  });

  it('does not shed for one long pause of the event loop', async () => {
    const t = await startTestSluice(
      overloadConfig(node!.url, 'event_loop_delay_ms: 40, heap_used_percent: 0, sample_interval_ms: 100'),
    );
    try {
      await waitFor(() => (t.sluice.overload?.delayMs ?? 1) < 40, 5000, 'a calm loop');
      busy(400);
      // Four more samples after the pause.
      const until = performance.now() + 450;
      await waitFor(() => performance.now() > until, 5000, 'four samples');
      assert.equal(t.sluice.overload!.episodes, 0, 'one pause is not overload');
      const r = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', body: BODY });
      assert.equal(r.status, 200);
      await r.arrayBuffer();
    } finally {
      await t.close();
    }
  });

  it('sheds past the heap threshold, and a reload that turns protection off takes requests again', async () => {
    const t = await startTestSluice(
      overloadConfig(node!.url, 'event_loop_delay_ms: 0, heap_used_percent: 0.01, sample_interval_ms: 50'),
    );
    try {
      await waitFor(() => t.sluice.overload?.shedding === true, 5000, 'shedding on heap');
      const r = await fetch(`${t.url}/v1/chat/completions`, {
        method: 'POST',
        body: BODY,
        headers: { 'x-request-id': 'shed-me-1' },
      });
      assert.equal(r.status, 503);
      assert.equal(r.headers.get('x-request-id'), 'shed-me-1', "the client's request id comes back");
      const other = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', body: BODY });
      assert.equal(other.status, 503);
      assert.match(other.headers.get('x-request-id') ?? '', /^\S{8,}$/, 'a new id when the client sent none');
      await other.arrayBuffer();
      assert.match(await r.text(), /heap [\d.]+ % of its limit, threshold 0\.01 %/);
      assert.ok((await metric(t, 'sluice_overload_heap_used_ratio')) > 0);
      await writeFile(
        t.configPath,
        overloadConfig(node!.url, 'event_loop_delay_ms: 0, heap_used_percent: 0'),
      );
      const reload = await fetch(`${t.adminUrl}/admin/reload`, { method: 'POST' });
      assert.equal(reload.status, 200);
      assert.equal(t.sluice.overload, null, 'protection is off');
      const ok = await fetch(`${t.url}/v1/chat/completions`, { method: 'POST', body: BODY });
      assert.equal(ok.status, 200);
      await ok.arrayBuffer();
      assert.ok(Number.isNaN(await metric(t, 'sluice_overload_shedding')), 'no overload series while off');
    } finally {
      await t.close();
    }
  });
});
