/**
 * audit-log through a real Sluice and a real simulated node: one JSON line per request with its
 * facts (tenant, route, pool, node, model, status, tokens, latency, the rejection reason), never the
 * API key nor a body unless bodies are kept, a stream read by the official OpenAI SDK with the token
 * count its client was told, and the file rotated by size.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { metric } from '../../test/plugin/plugin-helpers.js';
import {
  chatRequest,
  LOOPBACK_HEAD,
  startRefused,
  startTestSluice,
  waitFor,
  type TestSluice,
} from '../../test/helpers/sluice.js';

type Line = Record<string, unknown>;

describe('audit-log', { timeout: 30_000 }, () => {
  let fleet: SimFleet | null = null;
  let t: TestSluice | null = null;
  let dir = '';

  before(async () => {
    process.env['SLUICE_TEST_AUDIT_KEY'] = 'sk-audit-secret-key';
    dir = await mkdtemp(join(tmpdir(), 'sluice-audit-'));
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(`${LOOPBACK_HEAD}plugins:
  - name: audit
    use: audit-log
    options: { path: ${join(dir, 'audit.log')}, max_bytes: 4096, max_files: 2 }
  - name: audit-bodies
    use: audit-log
    options: { path: ${join(dir, 'bodies.log')}, include_bodies: true }
pools:
  - name: gpu
    nodes:
      - url: ${fleet.urls[0]}
routes:
  - name: bodies
    match: { headers: { x-keep: bodies } }
    pool: gpu
    plugins: [audit-bodies]
  - name: all
    match: {}
    pool: gpu
    plugins: [audit]
tenants:
  - name: acme
    keys: [{ env: SLUICE_TEST_AUDIT_KEY }]
`);
  });
  after(async () => {
    await t?.close();
    await fleet?.close();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  /** A config with one audit-log instance writing to `path` on a route to the fleet's node. */
  function oneAuditLog(path: string): string {
    return `${LOOPBACK_HEAD}plugins:
  - name: audit
    use: audit-log
    options: { path: ${path} }
pools:
  - name: gpu
    nodes:
      - url: ${fleet!.urls[0]}
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [audit]
`;
  }

  async function lines(file: string): Promise<Line[]> {
    const text = await readFile(join(dir, file), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Line);
  }

  it('writes one line per request with its facts and never the key or a body', async () => {
    const ok = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest({}, { authorization: 'Bearer sk-audit-secret-key' }),
    );
    assert.equal(ok.status, 200);
    await ok.text();
    const bad = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest({}, { authorization: 'Bearer wrong' }),
    );
    assert.equal(bad.status, 401);
    const refusal = await bad.text();
    const ids = [ok.headers.get('x-request-id'), bad.headers.get('x-request-id')];
    await waitFor(async () => (await lines('audit.log')).length >= 2, 3000, 'two audit lines');
    const text = await readFile(join(dir, 'audit.log'), 'utf8');
    assert.ok(!text.includes('sk-audit-secret-key'));
    assert.ok(!text.includes('"hi"'), 'no body');
    const [a, b] = (await lines('audit.log')).filter((l) => ids.includes(l['request_id'] as string));
    assert.ok(a !== undefined && b !== undefined);
    assert.equal(a['tenant'], 'acme');
    assert.equal(a['route'], 'all');
    assert.equal(a['pool'], 'gpu');
    assert.equal(a['node'], new URL(fleet!.urls[0]!).origin);
    assert.equal(a['model'], 'm');
    assert.equal(a['status'], 200);
    assert.equal(typeof a['total_tokens'], 'number');
    assert.ok((a['latency_ms'] as number) > 0);
    assert.equal(a['error'], null);
    assert.equal(b['status'], 401);
    assert.equal(b['error'], 'invalid_api_key');
    assert.equal(b['bytes_out'], Buffer.byteLength(refusal), "Sluice's own answer counts");
  });

  it('records a stream an OpenAI SDK client read with the token count the client was told', async () => {
    const client = new OpenAI({ baseURL: `${t!.url}/v1`, apiKey: 'sk-audit-secret-key', maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({
        model: 'm',
        messages: [{ role: 'user', content: 'count to five' }],
        max_tokens: 12,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    let total: number | null = null;
    for await (const chunk of stream) if (chunk.usage) total = chunk.usage.total_tokens;
    assert.ok(total !== null && total > 0, 'the client got a usage chunk');
    const id = response.headers.get('x-request-id');
    await waitFor(
      async () => (await lines('audit.log')).some((l) => l['request_id'] === id),
      3000,
      'the stream audit line',
    );
    const line = (await lines('audit.log')).find((l) => l['request_id'] === id)!;
    assert.equal(line['status'], 200);
    assert.equal(line['tenant'], 'acme');
    assert.equal(line['total_tokens'], total);
  });

  it('keeps bodies only where configured', async () => {
    const r = await fetch(
      `${t!.url}/v1/chat/completions`,
      chatRequest({}, { authorization: 'Bearer sk-audit-secret-key', 'x-keep': 'bodies' }),
    );
    await r.text();
    await waitFor(async () => (await lines('bodies.log')).length >= 1, 3000, 'a body line');
    const [l] = await lines('bodies.log');
    assert.match(l!['request_body'] as string, /"content":"hi"/);
    assert.match(l!['response_body'] as string, /chat\.completion/);
  });

  it('rotates the file past max_bytes', async () => {
    for (let i = 0; i < 20; i++) {
      const r = await fetch(
        `${t!.url}/v1/chat/completions`,
        chatRequest({}, { authorization: 'Bearer sk-audit-secret-key' }),
      );
      await r.text();
    }
    await waitFor(async () => (await readdir(dir)).includes('audit.log.2'), 3000, 'two rotated files');
    // Requests are over, so no rotation moves the oldest file while it is read.
    await waitFor(
      async () => (await readdir(dir)).filter((f) => f.startsWith('audit.log')).length === 3,
      3000,
      'rotation done',
    );
    assert.ok(!(await readdir(dir)).includes('audit.log.3'), 'max_files: 2 keeps two rotated files');
    const rotated = (await readFile(join(dir, 'audit.log.2'), 'utf8')).split('\n').filter((x) => x !== '');
    assert.ok(rotated.length > 0);
    for (const l of rotated) JSON.parse(l);
  });

  it('refuses a config whose audit file cannot be written, naming it', async () => {
    const missing = join(dir, 'no-such-dir', 'audit.log');
    const refused = await startRefused(oneAuditLog(missing));
    assert.ok(refused.message.includes(`cannot write the audit log ${missing}`), refused.message);
    assert.match(refused.message, /ENOENT/);
  });

  it('counts the lines a failing file drops, and opens the file again a second later', async () => {
    // Every write to /dev/full fails (ENOSPC), as on a full disk.
    const full = await startTestSluice(oneAuditLog('/dev/full'));
    const dropped = 'sluice_plugin_audit_log_dropped_total{plugin="audit"}';
    const send = async (): Promise<void> => {
      const r = await fetch(`${full.url}/v1/chat/completions`, chatRequest());
      await r.text();
      await new Promise((res) => setTimeout(res, 100));
    };
    try {
      await send(); // written; the write fails
      await send(); // dropped
      assert.equal(await metric(full, dropped), 1);
      await new Promise((res) => setTimeout(res, 1100));
      await send(); // the file is opened again and written; it fails again
      await send(); // dropped
      assert.equal(await metric(full, dropped), 2, 'a line a second later went to the reopened file');
      assert.ok(full.logs.some((l) => l.includes('cannot write the audit log')));
    } finally {
      await full.close();
    }
  });
});
