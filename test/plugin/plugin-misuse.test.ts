/**
 * A plugin that misuses the request API (values of the wrong type, a body on a 204, a success
 * status for an error) or its metrics (a label value or a value of the wrong type) fails its hook
 * like any plugin error: 500 `plugin_error` for the client, counted, and Sluice serves on. Such
 * values used to reach the server's writer and throw there, outside the hook, which ended the
 * process; a bad metric series used to break the admin `/metrics` for good.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection, rawHeader } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';
import { metric } from './plugin-helpers.js';

const MISUSE_PLUGIN = fileURLToPath(new URL('./fixtures/misuse-plugin.js', import.meta.url));

/** The `x-misuse` cases and the phase each one fails in. */
const CASES: [string, string][] = [
  ['respond-object', 'onRequest'],
  ['respond-number', 'onRequest'],
  ['respond-null', 'onRequest'],
  ['respond-header-number', 'onRequest'],
  ['respond-204-body', 'onRequest'],
  ['respond-205-body', 'onRequest'],
  ['respond-date-header', 'onRequest'],
  ['reject-200', 'onRequest'],
  ['reject-object-message', 'onRequest'],
  ['set-header-number', 'onRequest'],
  ['response-header-number', 'onResponseHead'],
  ['metric-label-object', 'onRequest'],
  ['metric-label-undefined', 'onRequest'],
  ['metric-label-nan', 'onRequest'],
  ['metric-label-count', 'onRequest'],
  ['metric-inc-string', 'onRequest'],
  ['metric-inc-nan', 'onRequest'],
  ['metric-inc-negative', 'onRequest'],
  ['metric-set-undefined', 'onRequest'],
  ['metric-set-infinity', 'onRequest'],
];

/** The admin `/metrics` text; fails unless it answers 200. */
async function exposition(t: TestSluice): Promise<string> {
  const res = await fetch(`${t.adminUrl}/metrics`);
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return text;
}

function chat(t: TestSluice, misuse: string | null): Promise<Response> {
  return fetch(`${t.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(misuse === null ? {} : { 'x-misuse': misuse }) },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
}

describe('a plugin that misuses the request API', { timeout: 60_000 }, () => {
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
      before(async () => {
        const plugins = `plugins:\n  - name: misuse\n    use: ${MISUSE_PLUGIN}\n`;
        t = await startTestSluice(
          withListenerKeys(basicConfig([fleet.urls[0]!], plugins, { route: '    plugins: [misuse]' }), {
            pipelining: engine.pipelining,
          }),
        );
      });
      after(async () => {
        await t?.close();
      });

      it('answers a HEAD that a plugin forwards as GET without a body, and the connection serves on', async () => {
        const c = await RawConnection.open(t!.url);
        try {
          await c.write('HEAD /v1/models HTTP/1.1\r\nHost: sluice\r\nx-misuse: head-to-get\r\n\r\n');
          const head = await c.readResponse(5000, true);
          assert.equal(head.status, 200);
          assert.ok(Number(rawHeader(head, 'content-length')) > 0, 'the GET answer has a body to leave out');
          await new Promise((r) => setTimeout(r, 150));
          assert.equal(c.pending.length, 0, 'a body followed the answer to HEAD');
          await c.write('GET /v1/models HTTP/1.1\r\nHost: sluice\r\n\r\n');
          assert.equal((await c.readResponse(5000)).status, 200);
        } finally {
          c.destroy();
        }
      });

      for (const [misuse, phase] of CASES) {
        it(`answers 500 plugin_error for ${misuse} and serves on`, async () => {
          const series = `sluice_plugin_errors_total{plugin="misuse",phase="${phase}"}`;
          const errors = await metric(t!, series);
          const res = await chat(t!, misuse);
          const body = (await res.json()) as { error: { code: string; message: string } };
          assert.equal(res.status, 500, JSON.stringify(body));
          assert.equal(body.error.code, 'plugin_error');
          assert.match(body.error.message, /misuse/);
          assert.equal(await metric(t!, series), errors + 1);
          const ok = await chat(t!, null);
          assert.equal(ok.status, 200);
          await ok.arrayBuffer();
          if (misuse.startsWith('metric-')) {
            assert.match(body.error.message, /TypeError|sluice_plugin_misuse/);
            const text = await exposition(t!);
            assert.doesNotMatch(
              text,
              /sluice_plugin_misuse_labelled_total\{/,
              'the bad call recorded nothing',
            );
            assert.doesNotMatch(text, /^sluice_plugin_misuse_level /m, 'the bad call recorded nothing');
          }
        });
      }

      it('takes a number as a label value (as its string) and keeps /metrics valid after a bad gauge value in onDone', async () => {
        const answered = 'sluice_plugin_misuse_status_answers_total{status="200"}';
        const done = 'sluice_plugin_errors_total{plugin="misuse",phase="onDone"}';
        const before = await metric(t!, answered);
        const errors = await metric(t!, done);
        for (const misuse of [null, 'done-gauge-undefined']) {
          const res = await chat(t!, misuse);
          assert.equal(res.status, 200, 'onDone cannot change the response');
          await res.arrayBuffer();
        }
        const text = await exposition(t!);
        assert.equal(await metric(t!, answered), before + 2);
        assert.equal(await metric(t!, done), errors + 1);
        assert.doesNotMatch(text, /undefined|NaN|Infinity/);
        for (const line of text.split('\n').filter((l) => l.startsWith('sluice_plugin_'))) {
          assert.match(
            line,
            /^[a-z_:][a-z0-9_:]*(\{[a-z_]+="(?:[^"\\\n]|\\.)*"(?:,[a-z_]+="(?:[^"\\\n]|\\.)*")*\})? -?\d/,
            line,
          );
        }
      });
    });
  }
});
