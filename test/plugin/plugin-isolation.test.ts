/**
 * Failure isolation through a real Sluice and real simulated nodes: a hook that throws, rejects or
 * hangs past timeout_ms, in every phase, ends the request with a 500 naming the plugin (before the
 * head), an SSE error event or a cut body (mid-stream), or nothing visible (onDone); `fail_open`
 * skips it; every failure is counted in sluice_plugin_errors_total; the process goes on serving.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { PHASES } from '../../plugins/api.js';
import {
  chatRequest,
  findNode,
  LOOPBACK_HEAD,
  startTestSluice,
  waitFor,
  type TestSluice,
} from '../helpers/sluice.js';
import { metric, PROBE_PLUGIN } from './plugin-helpers.js';

const HOWS = ['throw', 'reject', 'hang'] as const;

function instances(prefix: string, failOpen: boolean): string[] {
  return PHASES.flatMap((phase) =>
    HOWS.map(
      (how) => `  - name: ${prefix}-${phase}-${how}
    use: ${PROBE_PLUGIN}
    timeout_ms: 100
    fail_open: ${failOpen}
    options: { fail_phase: ${phase}, fail_how: ${how}, fail_after_chunks: 2 }`,
    ),
  );
}

function routes(prefix: string): string[] {
  return PHASES.flatMap((phase) =>
    HOWS.map(
      (how) => `  - name: ${prefix}-${phase}-${how}
    match: { headers: { x-case: ${prefix}-${phase}-${how} } }
    pool: gpu
    plugins: [${prefix}-${phase}-${how}]`,
    ),
  );
}

function config(node: string): string {
  return `${LOOPBACK_HEAD}plugins:
${[...instances('f', false), ...instances('o', true)].join('\n')}
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
${[...routes('f'), ...routes('o')].join('\n')}
  - name: plain
    match: {}
    pool: gpu
`;
}

interface ErrorBody {
  error: { message: string; type: string; code: string };
}

describe('plugin failure isolation', { timeout: 90_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls[0]!));
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  const send = (name: string, body: Record<string, unknown> = {}): Promise<Response> =>
    fetch(`${t!.url}/v1/chat/completions`, chatRequest({ max_tokens: 8, ...body }, { 'x-case': name }));

  const errors = (name: string, phase: string): Promise<number> =>
    metric(t!, `sluice_plugin_errors_total{plugin="${name}",phase="${phase}"}`);

  for (const phase of ['onRequest', 'onRoute', 'onUpstreamRequest', 'onResponseHead'] as const) {
    for (const how of HOWS) {
      it(`answers 500 naming the plugin when a hook ${how}s in ${phase}`, async () => {
        const name = `f-${phase}-${how}`;
        const r = await send(name);
        assert.equal(r.status, 500);
        const body = (await r.json()) as ErrorBody;
        assert.equal(body.error.code, 'plugin_error');
        assert.equal(body.error.type, 'server_error');
        assert.match(body.error.message, new RegExp(`plugin ${name} failed in ${phase}`));
        if (how === 'hang') assert.match(body.error.message, /timed out after 100 ms/);
        assert.equal(await errors(name, phase), 1);
        // Nothing is left counted against the node.
        await waitFor(() => findNode(t!, fleet!.urls[0]!)!.inFlight === 0, 2000, 'node released');
      });
    }
  }

  for (const how of HOWS) {
    it(`ends a stream with an SSE error event when a chunk hook ${how}s mid-stream`, async () => {
      const name = `f-onResponseChunk-${how}`;
      const r = await send(name, { stream: true });
      assert.equal(r.status, 200);
      const text = await r.text();
      const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
      assert.ok(events.length >= 2, `the first chunk went out before the failure: ${text}`);
      const last = JSON.parse(events.at(-1)!.slice(6)) as ErrorBody;
      assert.equal(last.error.code, 'plugin_error');
      assert.match(last.error.message, new RegExp(`plugin ${name} failed in onResponseChunk`));
      assert.ok(!text.includes('[DONE]'));
      assert.equal(await errors(name, 'onResponseChunk'), 1);
    });
  }

  it('answers a clean 500 when a chunk hook fails before any byte of the answer went out', async () => {
    const name = 'f-onResponseChunk-throw';
    // fail_after_chunks counts on from the stream above: each answer now fails at its first chunk.
    // The head waits for the first body bytes, so it is taken back and the error replaces it.
    for (const stream of [false, true]) {
      const before = await errors(name, 'onResponseChunk');
      const r = await send(name, { stream });
      assert.equal(r.status, 500, `stream: ${stream}`);
      assert.match(r.headers.get('content-type') ?? '', /application\/json/);
      const body = (await r.json()) as ErrorBody;
      assert.equal(body.error.code, 'plugin_error');
      assert.match(body.error.message, new RegExp(`plugin ${name} failed in onResponseChunk`));
      assert.equal(await errors(name, 'onResponseChunk'), before + 1);
    }
  });

  for (const how of HOWS) {
    it(`answers normally and counts the failure when onDone ${how}s`, async () => {
      const name = `f-onDone-${how}`;
      const r = await send(name);
      assert.equal(r.status, 200);
      assert.equal(((await r.json()) as { object: string }).object, 'chat.completion');
      await waitFor(async () => (await errors(name, 'onDone')) === 1, 3000, 'onDone failure counted');
    });
  }

  for (const phase of PHASES) {
    it(`skips a failing ${phase} hook with fail_open and still counts it`, async () => {
      for (const how of HOWS) {
        const name = `o-${phase}-${how}`;
        const r = await send(name, phase === 'onResponseChunk' ? { stream: true } : {});
        assert.equal(r.status, 200, `${name}`);
        const text = await r.text();
        if (phase === 'onResponseChunk') assert.ok(text.includes('[DONE]'), text);
        else assert.equal((JSON.parse(text) as { object: string }).object, 'chat.completion');
        await waitFor(async () => (await errors(name, phase)) >= 1, 3000, `${name} counted`);
      }
    });
  }

  it('gives back everything when the client leaves while a hook is pending', async () => {
    for (const phase of ['onRoute', 'onUpstreamRequest', 'onResponseHead'] as const) {
      const name = `f-${phase}-hang`;
      const before = await errors(name, phase);
      const ac = new AbortController();
      const pending = fetch(`${t!.url}/v1/chat/completions`, {
        ...chatRequest({}, { 'x-case': name }),
        signal: ac.signal,
      });
      await waitFor(() => t!.sluice.stats.inFlight === 1, 2000, 'the request in flight');
      ac.abort();
      await assert.rejects(pending);
      await waitFor(() => t!.sluice.stats.inFlight === 0, 2000, `${phase}: the request finished`);
      await waitFor(() => findNode(t!, fleet!.urls[0]!)!.inFlight === 0, 2000, `${phase}: the node released`);
      // The hook that was still pending when the client left is not counted as failed.
      await new Promise((r) => setTimeout(r, 150));
      assert.equal(await errors(name, phase), before);
    }
  });

  it('keeps serving after every failure', async () => {
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.status, 200);
    await r.text();
  });
});
