/**
 * `Idempotency-Key` on the batch API's POST endpoints other than `/v1/batch` and batch creation,
 * and the key lifetime from config, through a real Sluice in front of a simulated node.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const TTL_MS = 1000; // the schema's minimum

const BOUNDARY = 'sluice-test-boundary';

/** One JSONL line of an embeddings batch. */
function jsonlLine(input: string): string {
  const body = { model: 'sim-embed', input };
  return `${JSON.stringify({ custom_id: input, method: 'POST', url: '/v1/embeddings', body })}\n`;
}

/** The exact bytes of a `POST /v1/files` form with a fixed boundary, so a retry sends the same body. */
function uploadForm(content: string): string {
  return (
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n` +
    `Content-Type: application/jsonl\r\n\r\n${content}\r\n--${BOUNDARY}--\r\n`
  );
}

async function post(
  url: string,
  body: string | FormData,
  key: string,
  contentType?: string,
): Promise<{ status: number; replayed: string | null; json: Record<string, unknown> }> {
  const headers: Record<string, string> = { 'idempotency-key': key };
  if (contentType !== undefined) headers['content-type'] = contentType;
  const r = await fetch(url, { method: 'POST', headers, body });
  return {
    status: r.status,
    replayed: r.headers.get('idempotent-replayed'),
    json: (await r.json()) as Record<string, unknown>,
  };
}

describe('Idempotency-Key across the batch API', () => {
  let fleet: SimFleet;
  let t: TestSluice;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig(fleet.urls, `batch_api:\n  idempotency: { ttl_ms: ${TTL_MS} }\n`));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('stores one file for a retried upload and replays its file object', async () => {
    const form = uploadForm(jsonlLine('retried upload'));
    const multipart = `multipart/form-data; boundary=${BOUNDARY}`;
    const first = await post(`${t.url}/v1/files`, form, 'upload-1', multipart);
    assert.equal(first.status, 200);
    const again = await post(`${t.url}/v1/files`, form, 'upload-1', multipart);
    assert.equal(again.status, 200);
    assert.equal(again.replayed, 'true');
    assert.deepEqual(again.json, first.json);
    const list = (await (await fetch(`${t.url}/v1/files`)).json()) as { data: { id: string }[] };
    assert.deepEqual(
      list.data.map((f) => f.id),
      [first.json['id']],
      'the retry stored no second file',
    );

    const other = await post(`${t.url}/v1/files`, uploadForm(jsonlLine('another')), 'upload-1', multipart);
    assert.equal(other.status, 409);
  });

  it('replays a retried upload whose client chose a new multipart boundary', async () => {
    const form = (): FormData => {
      const f = new FormData();
      f.append('purpose', 'batch');
      f.append('file', new Blob([jsonlLine('sdk retry')]), 'in.jsonl');
      return f;
    };
    const first = await post(`${t.url}/v1/files`, form(), 'upload-sdk');
    assert.equal(first.status, 200);
    const again = await post(`${t.url}/v1/files`, form(), 'upload-sdk');
    assert.equal(again.status, 200);
    assert.equal(again.replayed, 'true');
  });

  it('forgets a completed key after batch_api.idempotency.ttl_ms', async () => {
    const batch = (input: string): string =>
      JSON.stringify({ endpoint: '/v1/embeddings', items: [{ model: 'sim-embed', input }] });
    const started = performance.now();
    const first = await post(`${t.url}/v1/batch`, batch('first'), 'ttl-1', 'application/json');
    assert.equal(first.status, 200);
    const reused = await post(`${t.url}/v1/batch`, batch('second'), 'ttl-1', 'application/json');
    assert.equal(reused.status, 409, 'the key is held within its TTL');
    let status = 409;
    while (status === 409 && performance.now() - started < TTL_MS + 4000) {
      await new Promise((r) => setTimeout(r, 50));
      status = (await post(`${t.url}/v1/batch`, batch('second'), 'ttl-1', 'application/json')).status;
    }
    const ms = performance.now() - started;
    assert.equal(status, 200, `the key still blocked another body after ${ms.toFixed(0)} ms`);
    assert.ok(ms >= TTL_MS - 50, `the key was forgotten after ${ms.toFixed(0)} ms, before its TTL`);
  });
});
