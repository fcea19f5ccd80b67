/**
 * How many header fields a request may carry with the default `max_header_count` (100), on both
 * engines: the own engine takes 100 fields (`Host` included) and answers 101 with its 431; the uWS
 * parser takes at most 98, whatever `max_header_count` says, and answers more with its own HTML 431
 * page before Sluice sees the request. This pins uWS's limit: an upgrade that changes it fails here
 * (docs/configuration.md and docs/security.md give the number).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { RawConnection } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** Most fields (Host included) each engine serves with the default max_header_count. */
const MOST_FIELDS = { uws: 98, net: 100 } as const;

/** A GET with `fields` header fields, Host the first. */
function getWithFields(fields: number): string {
  let head = 'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n';
  for (let i = 1; i < fields; i++) head += `X-H${i}: v\r\n`;
  return `${head}\r\n`;
}

for (const engine of ENGINES)
  describe(`header field count on the ${engine.name} engine`, { timeout: 30_000 }, () => {
    let fleet: SimFleet | undefined;
    let t: TestSluice | undefined;

    before(async () => {
      fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
      t = await startTestSluice(withListenerKeys(basicConfig(fleet.urls), { pipelining: engine.pipelining }));
    });

    after(async () => {
      await t?.close();
      await fleet?.close();
    });

    const most = MOST_FIELDS[engine.name];
    for (const fields of [most - 1, most, most + 1, most + 2]) {
      const served = fields <= most;
      it(`${fields} fields: ${served ? '200' : engine.name === 'uws' ? "uWS's own 431 page" : "Sluice's 431"}`, async () => {
        const conn = await RawConnection.open(t!.url);
        try {
          await conn.write(getWithFields(fields));
          const r = await conn.readResponse();
          const body = r.body.toString('latin1');
          if (served) assert.equal(r.status, 200, body);
          else {
            assert.equal(r.status, 431, body);
            if (engine.name === 'uws') assert.match(body, /uWebSockets/);
            else assert.match(body, /"code": ?"request_headers_too_large"/);
          }
        } finally {
          conn.destroy();
        }
      });
    }
  });
