/**
 * What a durable batch records for each kind of node answer: a 2xx with a JSON object is the item's
 * output; a 2xx without one (an HTML page from a gateway, an empty 200, a 204, JSON null or an
 * array) is a failed attempt,
 * retried and then failed, never an output line whose body is a string (OpenAI's output bodies are
 * objects, and SDK code reads `response.body.data`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

interface Line {
  custom_id: string;
  response: { status_code: number; body: unknown } | null;
  error: { code: string; message: string } | null;
}

describe('durable batch answers that are not JSON objects', { timeout: 30_000 }, () => {
  let node: ScriptedNode | undefined;
  let t: TestSluice | undefined;
  const calls = new Map<string, number>();

  before(async () => {
    node = await startScriptedNode((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        const input = (JSON.parse(raw) as { input: string }).input;
        calls.set(input, (calls.get(input) ?? 0) + 1);
        if (input === 'html') {
          res.writeHead(200, { 'content-type': 'text/html' });
          res.end('<html>gateway page</html>');
        } else if (input === 'empty') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end();
        } else if (input === 'no-content') {
          res.writeHead(204);
          res.end();
        } else if (input === 'null' || input === 'array') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(input === 'null' ? 'null' : '[1]');
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ object: 'list', data: [{ index: 0, embedding: [0.5] }] }));
        }
      });
    });
    t = await startTestSluice(
      basicConfig(
        [node.url],
        'batch_api:\n  jobs: { concurrency: 2, poll_ms: 20, max_attempts: 2, retry_base_ms: 10 }\n',
      ),
    );
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  it('fails them after their attempts, and keeps the JSON answer as output', async () => {
    const client = new OpenAI({ baseURL: `${t!.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const inputs = ['json', 'html', 'empty', 'no-content', 'null', 'array'];
    const jsonl = inputs
      .map((input) =>
        JSON.stringify({
          custom_id: input,
          method: 'POST',
          url: '/v1/embeddings',
          body: { model: 'e', input },
        }),
      )
      .join('\n');
    const file = await client.files.create({
      file: await toFile(Buffer.from(jsonl), 'in.jsonl'),
      purpose: 'batch',
    });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    let batch = created;
    await waitFor(
      async () => {
        batch = await client.batches.retrieve(created.id);
        return batch.status === 'completed';
      },
      20_000,
      'the batch to complete',
    );
    assert.deepEqual(batch.request_counts, { total: 6, completed: 1, failed: 5 });
    const parse = (text: string): Line[] =>
      text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Line);
    const out = parse(await (await client.files.content(batch.output_file_id!)).text());
    assert.deepEqual(
      out.map((l) => [l.custom_id, typeof l.response?.body]),
      [['json', 'object']],
    );
    const failed = parse(await (await client.files.content(batch.error_file_id!)).text());
    assert.deepEqual(
      failed.map((l) => [l.custom_id, l.error?.code]),
      [
        ['html', 'request_failed'],
        ['empty', 'request_failed'],
        ['no-content', 'request_failed'],
        ['null', 'request_failed'],
        ['array', 'request_failed'],
      ],
    );
    assert.match(
      failed[0]!.error!.message,
      /answered 200 without a JSON object \(content-type "text\/html"\)/,
    );
    assert.match(failed[2]!.error!.message, /answered 204 without a JSON object \(an empty body\)/);
    // Worded as the synchronous endpoint words the same answers.
    assert.equal(
      failed[3]!.error!.message,
      'the node answered 200 without a JSON object (the JSON value null)',
    );
    assert.equal(failed[4]!.error!.message, 'the node answered 200 without a JSON object (a JSON array)');
    for (const input of ['html', 'empty', 'no-content', 'null', 'array'])
      assert.equal(calls.get(input), 2, `${input} attempts`);
  });
});
