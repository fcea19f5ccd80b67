/**
 * The plugin phases through a real Sluice and real simulated nodes: the order each phase runs in,
 * listener plugins before route plugins, sync and async hooks alike, local answers from onRequest
 * and onRoute, a pool chosen in onRoute, per-attempt headers, and a route without plugins untouched.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { chatRequest, findNode, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { PROBE_PLUGIN, probeTrace } from './plugin-helpers.js';
import { RawConnection } from '../helpers/raw-http.js';

function config(
  nodes: readonly string[],
  probeOptions = '{}',
  routePlugins = '[probe]',
  listenerPlugins = '[]',
  poolExtra = '',
): string {
  return `listeners:
  - name: public
    address: 127.0.0.1
    port: 0
    plugins: ${listenerPlugins}
admin:
  address: 127.0.0.1
  port: 0
plugins:
  - name: probe
    use: ${PROBE_PLUGIN}
    options: ${probeOptions}
  - name: edge
    use: ${PROBE_PLUGIN}
pools:
  - name: gpu
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
${poolExtra}  - name: other
    nodes:
      - url: ${nodes[nodes.length - 1]}
routes:
  - name: plain
    match: { path: /v1/embeddings }
    pool: gpu
  - name: chat
    match: {}
    pool: gpu
    plugins: ${routePlugins}
`;
}

describe('plugin phases', { timeout: 60_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  async function restart(yaml: string): Promise<TestSluice> {
    await t?.close();
    t = await startTestSluice(yaml);
    return t;
  }

  for (const mode of ['sync', 'async'] as const) {
    it(`runs every phase once, in lifecycle order, with ${mode} hooks`, async () => {
      const s = await restart(config(fleet!.urls, `{ async: ${mode === 'async'}, chunks: true }`));
      const r = await fetch(`${s.url}/v1/chat/completions`, chatRequest());
      assert.equal(r.status, 200);
      const body = (await r.json()) as { choices: unknown[] };
      assert.equal(body.choices.length, 1);
      const id = r.headers.get('x-request-id')!;
      await waitFor(() => (probeTrace().get(id) ?? []).includes('probe:onDone'), 5000, 'onDone');
      const seen = probeTrace()
        .get(id)!
        .filter((p) => p !== 'probe:onResponseChunk');
      assert.deepEqual(seen, [
        'probe:onRequest',
        'probe:onRoute',
        'probe:onUpstreamRequest',
        'probe:onResponseHead',
        'probe:onDone',
      ]);
      assert.ok(probeTrace().get(id)!.includes('probe:onResponseChunk'));
    });
  }

  it('runs listener plugins first: their onRequest before routing, then the route plugins', async () => {
    const s = await restart(config(fleet!.urls, '{}', '[probe]', '[edge]'));
    const r = await fetch(`${s.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.status, 200);
    await r.text();
    const id = r.headers.get('x-request-id')!;
    await waitFor(() => (probeTrace().get(id) ?? []).includes('probe:onDone'), 5000, 'onDone');
    assert.deepEqual(probeTrace().get(id)!.slice(0, 4), [
      'edge:onRequest',
      'probe:onRequest',
      'edge:onRoute',
      'probe:onRoute',
    ]);
    // The listener's plugins apply to every route of the listener, including one without its own.
    const e = await fetch(`${s.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'e', input: 'x' }),
    });
    assert.equal(e.status, 200);
    await e.text();
    const eid = e.headers.get('x-request-id')!;
    await waitFor(() => (probeTrace().get(eid) ?? []).includes('edge:onDone'), 5000, 'onDone');
    assert.ok(
      !probeTrace()
        .get(eid)!
        .some((p) => p.startsWith('probe:')),
    );
  });

  it('leaves a route without plugins alone', async () => {
    const s = await restart(config(fleet!.urls));
    const r = await fetch(`${s.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'e', input: 'x' }),
    });
    assert.equal(r.status, 200);
    await r.text();
    assert.equal(probeTrace().get(r.headers.get('x-request-id')!), undefined);
  });

  for (const stream of [false, true]) {
    it(`drops a hedge whose async onUpstreamRequest is still pending when the first attempt answers (${stream ? 'stream' : 'plain'})`, async () => {
      const s = await restart(
        config(
          fleet!.urls,
          '{ upstream_delay_ms: 400, upstream_delay_attempt: 2 }',
          '[probe]',
          '[]',
          '    hedge: { min_samples: 1, min_delay_ms: 10, budget_percent: 100, percentile: 50 }\n',
        ),
      );
      for (let i = 0; i < 4; i++) {
        const warm = await fetch(`${s.url}/v1/chat/completions`, chatRequest({ stream }));
        assert.equal(warm.status, 200);
        await warm.text();
      }
      // The first attempt answers after 150 ms; the hedge, sent after about 10 ms, waits 400 ms in its hook.
      const r = await fetch(
        `${s.url}/v1/chat/completions`,
        chatRequest({ stream, max_tokens: 6 }, { 'x-sim-stall-ms': '150' }),
      );
      assert.equal(r.status, 200);
      const text = await r.text();
      if (stream) {
        assert.doesNotMatch(text, /x-request-id|content-type/i, 'a second head inside the body');
        assert.match(text, /data: \[DONE\]\s*$/);
      } else assert.equal((JSON.parse(text) as { choices: unknown[] }).choices.length, 1);
      const id = r.headers.get('x-request-id')!;
      assert.ok(
        (probeTrace().get(id) ?? []).filter((p) => p === 'probe:onUpstreamRequest').length === 2,
        'the hedge was started',
      );
      // Past the hook's 400 ms: neither node still counts the hedge that never went out.
      await new Promise((res) => setTimeout(res, 500));
      for (const url of fleet!.urls) assert.equal(findNode(s, url)?.inFlight, 0, `${url} in flight`);
    });
  }

  for (const status of [204, 304]) {
    it(`sends no body when onResponseHead sets ${status}, and the connection serves the next request`, async () => {
      const s = await restart(config(fleet!.urls, `{ set_status: ${status} }`));
      const conn = await RawConnection.open(s.url);
      try {
        const body = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}';
        const request = `POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
        await conn.write(request);
        const first = await conn.readResponse(5000, true);
        assert.equal(first.status, status);
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(
          conn.pending.length,
          0,
          `bytes after the ${status} head: ${conn.pending.toString('latin1')}`,
        );
        if (!conn.closed) {
          await conn.write(request);
          assert.equal((await conn.readResponse(5000, true)).status, status);
        }
      } finally {
        conn.destroy();
      }
    });
  }

  it("runs a listener plugin's onDone for a request no route took: no route matched, or the plugin failed", async () => {
    const yaml = config(fleet!.urls, '{}', '[probe]', '[edge]')
      .replace(
        '  - name: edge\n    use: ',
        '  - name: edge\n    options: { fail_phase: onRequest, fail_how: reject }\n    use: ',
      )
      .replace('  - name: chat\n    match: {}', '  - name: chat\n    match: { path: /v1/chat/completions }');
    assert.match(yaml, /fail_phase: onRequest/);
    const s = await restart(yaml);
    // The edge plugin rejects in onRequest: 500, and its onDone still runs.
    const failed = await fetch(`${s.url}/v1/chat/completions`, chatRequest());
    assert.equal(failed.status, 500);
    await failed.text();
    const failedId = failed.headers.get('x-request-id')!;
    await waitFor(
      () => (probeTrace().get(failedId) ?? []).includes('edge:onDone'),
      5000,
      'onDone after a failure',
    );
    assert.deepEqual(probeTrace().get(failedId), ['edge:onRequest', 'edge:onDone']);
    const s2 = await restart(
      config(fleet!.urls, '{}', '[probe]', '[edge]').replace(
        '  - name: chat\n    match: {}',
        '  - name: chat\n    match: { path: /v1/chat/completions }',
      ),
    );
    const missing = await fetch(`${s2.url}/v1/nowhere`, { method: 'POST', body: '{}' });
    assert.equal(missing.status, 404);
    await missing.text();
    const id = missing.headers.get('x-request-id')!;
    await waitFor(() => (probeTrace().get(id) ?? []).includes('edge:onDone'), 5000, 'onDone after a 404');
    assert.deepEqual(probeTrace().get(id), ['edge:onRequest', 'edge:onDone']);
  });
});
