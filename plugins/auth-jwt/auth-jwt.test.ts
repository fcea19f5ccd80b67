/**
 * auth-jwt through a real Sluice and a real simulated node, seen by the OpenAI SDK: HS256, RS256
 * and ES256 tokens (keys in the options and in a JWKS file), the tenant taken from a claim (its
 * limits apply), and 401s in the OpenAI shape for a missing, expired, wrongly signed or
 * wrong-audience token and for a tenant that is not configured.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { LOOPBACK_HEAD, startTestSluice, type TestSluice } from '../../test/helpers/sluice.js';

const b64 = (v: object | Buffer): string =>
  (Buffer.isBuffer(v) ? v : Buffer.from(JSON.stringify(v))).toString('base64url');

function jwt(
  alg: 'HS256' | 'RS256' | 'ES256',
  key: Buffer | KeyObject,
  claims: object,
  kid?: string,
): string {
  const input = `${b64({ alg, typ: 'JWT', ...(kid === undefined ? {} : { kid }) })}.${b64(claims)}`;
  let sig: Buffer;
  if (alg === 'HS256') sig = createHmac('sha256', key).update(input).digest();
  else if (alg === 'RS256') sig = sign('sha256', Buffer.from(input), key);
  else sig = sign('sha256', Buffer.from(input), { key: key as KeyObject, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64(sig)}`;
}

const SECRET = 'a-shared-secret-of-enough-length';
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });

describe('auth-jwt', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let dir = '';
  const now = (): number => Math.floor(Date.now() / 1000);
  const claims = (extra: object = {}): object => ({ sub: 'acme', aud: 'sluice', exp: now() + 300, ...extra });

  before(async () => {
    process.env['SLUICE_TEST_JWT_SECRET'] = SECRET;
    dir = await mkdtemp(join(tmpdir(), 'sluice-jwt-'));
    const jwks = join(dir, 'jwks.json');
    await writeFile(
      jwks,
      JSON.stringify({ keys: [{ ...ec.publicKey.export({ format: 'jwk' }), kid: 'ec1' }] }),
    );
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    const pem = (rsa.publicKey.export({ format: 'pem', type: 'spki' }) as string).trim().split('\n');
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: jwt
    use: auth-jwt
    options:
      audience: sluice
      jwks_file: ${jwks}
      keys:
        - { alg: HS256, kid: hs1, secret_env: SLUICE_TEST_JWT_SECRET }
        - alg: RS256
          kid: rs1
          public_key: |
${pem.map((l) => `            ${l}`).join('\n')}
pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [jwt]
tenants:
  - name: acme
    keys: [{ sha256: 7769f377e6ab25a058a4031b9a764c4cccf270e213dbca10aff7339a393ec400 }]
    limits: { requests_per_minute: 1000 }
  - name: tiny
    keys: [{ sha256: 61fbf22165477fe110fa107d111b22ad61a8a34e65439389e799447b461989de }]
    limits: { requests_per_minute: 1 }
`);
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  const ask = (token: string) =>
    new OpenAI({ baseURL: `${t!.url}/v1`, apiKey: token, maxRetries: 0 }).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });

  const unauthorized = (why: RegExp) => (e: unknown) =>
    e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key' && why.test(e.message);

  it('accepts HS256, RS256 and ES256 tokens (keys from options and a JWKS file)', async () => {
    for (const token of [
      jwt('HS256', Buffer.from(SECRET), claims(), 'hs1'),
      jwt('RS256', rsa.privateKey, claims(), 'rs1'),
      jwt('ES256', ec.privateKey, claims(), 'ec1'),
    ]) {
      const r = await ask(token);
      assert.equal(r.object, 'chat.completion');
    }
  });

  it('serves the request as the tenant named by the claim, with its limits', async () => {
    const token = jwt('HS256', Buffer.from(SECRET), claims({ sub: 'tiny' }));
    await ask(token);
    await assert.rejects(ask(token), (e: unknown) => e instanceof OpenAI.RateLimitError);
  });

  it('answers 401 in the OpenAI shape for bad tokens', async () => {
    await assert.rejects(ask('not-a-jwt'), unauthorized(/not a compact JWS/));
    await assert.rejects(
      ask(jwt('HS256', Buffer.from(SECRET), claims({ exp: now() - 120 }))),
      unauthorized(/expired/),
    );
    await assert.rejects(
      ask(jwt('HS256', Buffer.from('wrong-secret'), claims())),
      unauthorized(/bad signature/),
    );
    await assert.rejects(
      ask(jwt('HS256', Buffer.from(SECRET), claims({ aud: 'other' }))),
      unauthorized(/wrong audience/),
    );
    await assert.rejects(
      ask(jwt('HS256', Buffer.from(SECRET), claims({ sub: 'nobody' }))),
      unauthorized(/not configured/),
    );
    await assert.rejects(
      ask(jwt('HS256', Buffer.from(SECRET), claims({ nbf: String(now() + 3600) }))),
      unauthorized(/nbf that is not a number/),
    );
    await assert.rejects(
      ask(jwt('HS256', Buffer.from(SECRET), claims({ nbf: now() + 3600 }))),
      unauthorized(/not valid yet/),
    );
    const r = await fetch(`${t!.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
    assert.equal(r.status, 401);
    const body = (await r.json()) as { error: { type: string; code: string } };
    assert.deepEqual([body.error.type, body.error.code], ['invalid_request_error', 'invalid_api_key']);
  });
});

/** One HS256 auth-jwt on the chat route, the batch API on, and `extra` (a tenants section) at the top. */
function batchConfig(node: string, extra: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: jwt
    use: auth-jwt
    options:
      audience: sluice
      keys:
        - { alg: HS256, kid: hs1, secret_env: SLUICE_TEST_JWT_SECRET }
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: chat
    match: { path: /v1/chat/completions }
    pool: gpu
    plugins: [jwt]
${extra}batch_api: {}
`;
}

describe('auth-jwt behind the batch API without tenants', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  const now = (): number => Math.floor(Date.now() / 1000);

  before(async () => {
    process.env['SLUICE_TEST_JWT_SECRET'] = SECRET;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(batchConfig(fleet.urls[0]!, ''));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  async function batch(headers: Record<string, string>): Promise<{ status: string; status_code: number }[]> {
    const r = await fetch(`${t!.url}/v1/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({
        endpoint: '/v1/chat/completions',
        items: [
          { custom_id: 'a', model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
          { custom_id: 'b', model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
        ],
      }),
    });
    assert.equal(r.status, 200);
    return ((await r.json()) as { results: { status: string; status_code: number }[] }).results;
  }

  it('refuses the items of a caller without a valid token, as the route would', async () => {
    const direct = await fetch(`${t!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(direct.status, 401);
    await direct.text();
    const anonymous = await batch({});
    assert.deepEqual(
      anonymous.map((x) => x.status_code),
      [401, 401],
    );
    const forged = await batch({
      authorization: `Bearer ${jwt('HS256', Buffer.from('wrong'), { aud: 'sluice' })}`,
    });
    assert.deepEqual(
      forged.map((x) => x.status_code),
      [401, 401],
    );
  });

  it('serves the items of a caller whose token the route accepts', async () => {
    const token = jwt('HS256', Buffer.from(SECRET), { sub: 'x', aud: 'sluice', exp: now() + 300 }, 'hs1');
    const served = await batch({ authorization: `Bearer ${token}` });
    assert.deepEqual(
      served.map((x) => x.status),
      ['succeeded', 'succeeded'],
    );
  });
});

describe('auth-jwt behind the batch API with tenants', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  const KEY = 'sk-jwt-batch-caller-0000000000000';

  before(async () => {
    process.env['SLUICE_TEST_JWT_SECRET'] = SECRET;
    process.env['SLUICE_TEST_JWT_BATCH_KEY'] = KEY;
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(
      batchConfig(
        fleet.urls[0]!,
        'tenants:\n  - name: acme\n    keys: [{ env: SLUICE_TEST_JWT_BATCH_KEY }]\n',
      ),
    );
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('serves the items of a caller the batch API authenticated by API key', async () => {
    const r = await fetch(`${t!.url}/v1/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({
        endpoint: '/v1/chat/completions',
        items: [{ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }],
      }),
    });
    assert.equal(r.status, 200);
    const results = ((await r.json()) as { results: { status: string; status_code: number }[] }).results;
    assert.deepEqual(
      results.map((x) => x.status_code),
      [200],
    );
  });
});
