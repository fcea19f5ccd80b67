/**
 * `OPTIONS *` (the asterisk-form target, RFC 9112 §3.2.4) asks about the server, not a resource:
 * Sluice answers it itself, 200 without content (RFC 9110 §9.3.7), before any route or plugin, on
 * a catch-all route as on routes that match by path; it never reaches a node. The uWS engine
 * refuses the asterisk-form itself (its own 505 page), as it does the absolute-form.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection, rawHeader } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const ROUTES = {
  'a catch-all route': (yaml: string) => yaml,
  'path_prefix routes only': (yaml: string) =>
    yaml.replace('    match: {}\n', '    match: { path_prefix: /v1/ }\n'),
};

/** Every request Sluice refused so far, summed over `sluice_refused_total`'s series. */
async function refusals(t: TestSluice): Promise<number> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('sluice_refused_total{')) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

for (const engine of ENGINES)
  describe(`OPTIONS * on the ${engine.name} engine`, { timeout: 30_000 }, () => {
    let fleet: SimFleet | undefined;
    const started: TestSluice[] = [];

    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    });

    after(async () => {
      for (const t of started) await t.close();
      await fleet?.close();
    });

    for (const [name, shape] of Object.entries(ROUTES))
      it(`with ${name}: ${engine.name === 'uws' ? "uWS's own 505" : '200 from Sluice itself'}, nothing forwarded${engine.name === 'uws' ? '' : ', connection kept'}`, async () => {
        const t = await startTestSluice(
          shape(withListenerKeys(basicConfig(fleet!.urls), { pipelining: engine.pipelining })),
        );
        started.push(t);
        const received = (): number => fleet!.nodes[0]!.stats().received;
        const before = received();
        const conn = await RawConnection.open(t.url);
        try {
          await conn.write('OPTIONS * HTTP/1.1\r\nHost: sluice.test\r\n\r\n');
          const r = await conn.readResponse();
          if (engine.name === 'uws') {
            // uWS refuses the asterisk-form itself (docs/security.md, uWS deviations).
            assert.equal(r.status, 505);
            assert.match(r.body.toString('latin1'), /uWebSockets/);
            assert.equal(received(), before, 'OPTIONS * reached the node');
            return;
          }
          assert.equal(r.status, 200, r.body.toString());
          assert.equal(rawHeader(r, 'content-length'), '0');
          assert.notEqual(rawHeader(r, 'x-request-id'), undefined);
          assert.equal(received(), before, 'OPTIONS * reached the node');
          await conn.write('GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n\r\n');
          const next = await conn.readResponse();
          assert.equal(next.status, 200, 'the connection did not serve the next request');
          assert.equal(received(), before + 1);
        } finally {
          conn.destroy();
        }
        assert.equal(await refusals(t), 0, 'OPTIONS * was counted as a refusal');
      });
  });
