/**
 * The main thread's side of the batch API under `server.workers` (proxy/runtime/endpoint-relay.ts),
 * in one thread against real simulated nodes: a call a worker passed on is answered whole, with the
 * tenant and the error code the worker counts the request under; one whose worker died stops its
 * work (a synchronous batch's items) and answers nothing. (test/runtime/workers.test.ts runs the
 * relay across threads, a client leaving included.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import type { RelayedCallDone, RelayedCallStart } from '../../proxy/runtime/endpoint-relay.js';
import { bufferOf } from '../../proxy/runtime/relay-wire.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

function callOf(
  id: number,
  method: string,
  path: string,
  key: string,
  body: unknown = null,
): RelayedCallStart {
  return {
    t: 'endpoint',
    id,
    requestId: `req-${id}`,
    method,
    path,
    url: path,
    host: 'sluice.test',
    headers: ['authorization', `Bearer ${key}`, 'content-type', 'application/json', 'x-sim-stall-ms', '5000'],
    body: body === null ? null : Buffer.from(JSON.stringify(body)),
  };
}

describe('the endpoint relay, the main thread side', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    process.env['RELAY_ACME_KEY'] = 'sk-acme-relay';
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(
      basicConfig(
        fleet.urls,
        `tenants:
  - name: acme
    keys: [{ env: RELAY_ACME_KEY }]
batch_api: {}
`,
      ),
    );
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  function answer(index: number, m: RelayedCallStart): Promise<RelayedCallDone> {
    return new Promise((resolve) => t!.sluice.acceptEndpointCall(index, m, resolve));
  }

  it('answers a call whole, naming the tenant, and lets go of it', async () => {
    const r = await answer(1, callOf(7, 'GET', '/v1/batches', 'sk-acme-relay'));
    assert.equal(r.id, 7);
    assert.equal(r.status, 200);
    assert.equal(r.truncated, false);
    assert.equal(r.tenant, 'acme');
    assert.equal(r.errorCode, null);
    assert.equal((JSON.parse(bufferOf(r.body).toString()) as { object: string }).object, 'list');
    assert.equal(t!.sluice.relayedCalls.size, 0);
  });

  it('answers a wrong key with 401 and its error code, for the worker to count', async () => {
    const r = await answer(1, callOf(8, 'GET', '/v1/batches', 'sk-wrong'));
    assert.equal(r.status, 401);
    assert.equal(r.tenant, '');
    assert.equal(r.errorCode, 'invalid_api_key');
  });

  it("stops the calls of a worker that died, and only that worker's, answering nothing", async () => {
    const items = Array.from({ length: 3 }, (_, i) => ({
      custom_id: `c-${i}`,
      model: 'sim-embed',
      input: `t ${i}`,
    }));
    const answered: RelayedCallDone[] = [];
    const stats = t!.sluice.stats;
    const before = stats.inFlight;
    t!.sluice.acceptEndpointCall(
      2,
      callOf(1, 'POST', '/v1/batch', 'sk-acme-relay', { endpoint: '/v1/embeddings', items }),
      (r) => answered.push(r),
    );
    await waitFor(() => stats.inFlight - before === 3, 5000, "the batch's three items to start");
    assert.equal(t!.sluice.relayedCalls.size, 1);
    t!.sluice.relayedCalls.workerDied(1);
    assert.equal(t!.sluice.relayedCalls.size, 1, "another worker's call is not touched");
    const t0 = performance.now();
    t!.sluice.relayedCalls.workerDied(2);
    await waitFor(
      () => stats.inFlight === before && t!.sluice.relayedCalls.size === 0,
      3000,
      'the items to stop',
    );
    assert.ok(performance.now() - t0 < 3000, 'stopped before their 5 s stall ended');
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(answered, [], 'nothing is sent to a worker that died');
  });
});
