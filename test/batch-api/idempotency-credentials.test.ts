/**
 * `Idempotency-Key` without tenants, where a route's auth-jwt is what authenticates: a stored answer
 * is replayed only to a request with the same credentials (Authorization, x-api-key), so a caller
 * with another, an expired or no token never gets the results of a caller whose token was valid,
 * on `/v1/batch`, `/v1/files` and `/v1/batches` alike. Real Sluice, a simulated node.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const SECRET = 'idempotency-credentials-secret-0000';
const b64 = (v: object | Buffer): string =>
  (Buffer.isBuffer(v) ? v : Buffer.from(JSON.stringify(v))).toString('base64url');

/** An HS256 token for audience `sluice` expiring `expIn` seconds from now (negative: expired). */
function token(sub: string, expIn: number): string {
  const claims = { sub, aud: 'sluice', exp: Math.floor(Date.now() / 1000) + expIn };
  const input = `${b64({ alg: 'HS256', typ: 'JWT', kid: 'hs1' })}.${b64(claims)}`;
  return `${input}.${b64(createHmac('sha256', Buffer.from(SECRET)).update(input).digest())}`;
}

function config(node: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: jwt
    use: auth-jwt
    options:
      audience: sluice
      keys:
        - { alg: HS256, kid: hs1, secret_env: SLUICE_TEST_IDEM_JWT_SECRET }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: embeddings
    match: { path: /v1/embeddings }
    pool: gpu
    plugins: [jwt]
batch_api: {}
`;
}

interface Answer {
  status: number;
  replayed: string | null;
  json: Record<string, unknown>;
}

describe('Idempotency-Key without tenants, behind auth-jwt', { timeout: 30_000 }, () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    process.env['SLUICE_TEST_IDEM_JWT_SECRET'] = SECRET;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet.urls[0]!));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  async function post(
    path: string,
    body: string | FormData,
    headers: Record<string, string>,
  ): Promise<Answer> {
    const r = await fetch(`${t.url}${path}`, { method: 'POST', headers, body });
    return {
      status: r.status,
      replayed: r.headers.get('idempotent-replayed'),
      json: (await r.json()) as Record<string, unknown>,
    };
  }

  const BATCH = JSON.stringify({
    endpoint: '/v1/embeddings',
    items: [
      { custom_id: 'a', model: 'sim-embed', input: 'one' },
      { custom_id: 'b', model: 'sim-embed', input: 'two' },
    ],
  });
  const codes = (a: Answer): unknown[] =>
    (a.json['results'] as { status_code: number }[]).map((r) => r.status_code);

  it('replays a synchronous batch only to the same credentials', async () => {
    const valid = token('alice', 300);
    const key = { 'content-type': 'application/json', 'idempotency-key': 'k-123' };
    const first = await post('/v1/batch', BATCH, { ...key, authorization: `Bearer ${valid}` });
    assert.equal(first.status, 200);
    assert.deepEqual(codes(first), [200, 200]);

    // Control: an expired token without a key has every item refused by the route.
    const expired = token('alice', -300);
    const control = await post('/v1/batch', BATCH, {
      'content-type': 'application/json',
      authorization: `Bearer ${expired}`,
    });
    assert.deepEqual(codes(control), [401, 401]);

    for (const [what, headers] of [
      ['no token', {}],
      ['an expired token', { authorization: `Bearer ${expired}` }],
      ["another caller's valid token", { authorization: `Bearer ${token('mallory', 300)}` }],
      ['an x-api-key instead', { 'x-api-key': valid }],
    ] as const) {
      const again = await post('/v1/batch', BATCH, { ...key, ...headers });
      assert.equal(again.status, 200, what);
      assert.equal(again.replayed, null, `${what}: not replayed`);
      const expected = what === "another caller's valid token" ? [200, 200] : [401, 401];
      assert.deepEqual(codes(again), expected, `${what}: the items ran for this caller`);
    }

    const same = await post('/v1/batch', BATCH, { ...key, authorization: `Bearer ${valid}` });
    assert.equal(same.replayed, 'true', 'the same caller still gets its stored answer');
    assert.deepEqual(same.json, first.json);
  });

  it('keeps uploads and batch creation apart by credentials too', async () => {
    const form = (): FormData => {
      const f = new FormData();
      f.append('purpose', 'batch');
      const line = {
        custom_id: 'x',
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: 'sim-embed', input: 'x' },
      };
      f.append('file', new Blob([JSON.stringify(line) + '\n']), 'in.jsonl');
      return f;
    };
    const alice = { authorization: `Bearer ${token('alice', 300)}` };
    const file = await post('/v1/files', form(), { ...alice, 'idempotency-key': 'up-1' });
    assert.equal(file.status, 200);
    const replay = await post('/v1/files', form(), { ...alice, 'idempotency-key': 'up-1' });
    assert.equal(replay.replayed, 'true');
    const stranger = await post('/v1/files', form(), { 'idempotency-key': 'up-1' });
    assert.equal(stranger.status, 200);
    assert.equal(stranger.replayed, null);
    assert.notEqual(stranger.json['id'], file.json['id'], 'a file of its own, not the stored answer');

    const create = JSON.stringify({
      input_file_id: file.json['id'],
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    const json = { 'content-type': 'application/json', 'idempotency-key': 'create-1' };
    const batch = await post('/v1/batches', create, { ...json, ...alice });
    assert.equal(batch.status, 200);
    assert.equal((await post('/v1/batches', create, { ...json, ...alice })).replayed, 'true');
    const other = await post('/v1/batches', create, { ...json, authorization: `Bearer ${token('bob', -5)}` });
    assert.equal(other.status, 200);
    assert.equal(other.replayed, null);
    assert.notEqual(other.json['id'], batch.json['id']);
  });
});
