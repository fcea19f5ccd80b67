import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseBatchInput } from '../../proxy/jobs/batch-input.js';
import { JobError } from '../../proxy/jobs/job-errors.js';
import { embeddingLine } from './job-test-kit.js';

function rejects(content: string, line: number | null, message: RegExp): void {
  assert.throws(
    () => parseBatchInput(content),
    (err: unknown) => {
      assert.ok(err instanceof JobError);
      assert.equal(err.line, line);
      assert.equal(err.kind.status, 400);
      assert.equal(err.toBody().error.code, 'invalid_file');
      assert.match(err.message, message);
      return true;
    },
  );
}

describe('batch input validation', () => {
  it('parses valid lines in order, skipping blank lines and keeping file line numbers', () => {
    const lines = parseBatchInput(`${embeddingLine(0)}\n\n${embeddingLine(1)}\n`);
    assert.deepEqual(
      lines.map((l) => [l.line, l.customId, l.url]),
      [
        [1, 'req-0', '/v1/embeddings'],
        [3, 'req-1', '/v1/embeddings'],
      ],
    );
    assert.deepEqual(lines[1]?.body, { model: 'sim-embed', input: 'text 1' });
  });

  it('rejects a line that is not JSON with its line number', () => {
    rejects(`${embeddingLine(0)}\n{"custom_id": "x",\n`, 2, /line 2: not valid JSON/);
  });

  it('rejects missing and mistyped fields with the field as param', () => {
    const base = { custom_id: 'a', method: 'POST', url: '/v1/embeddings', body: {} };
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ ...base, custom_id: undefined }, /custom_id/],
      [{ ...base, custom_id: 7 }, /custom_id/],
      [{ ...base, method: 'GET' }, /method/],
      [{ ...base, url: 'http://x/v1/embeddings' }, /url/],
      [{ ...base, body: [1] }, /body/],
      [{ ...base, body: { model: 'm', stream: true } }, /"body\.stream" must not be true/],
      [{ ...base, extra: 1 }, /unknown field "extra"/],
    ];
    for (const [obj, re] of cases) rejects(`${embeddingLine(9)}\n${JSON.stringify(obj)}`, 2, re);
    rejects('[1,2]', 1, /not a JSON object/);
  });

  it('rejects a duplicate custom_id, naming both lines', () => {
    rejects(
      `${embeddingLine(0)}\n${embeddingLine(1)}\n${embeddingLine(0)}\n`,
      3,
      /duplicate custom_id "req-0" \(first used on line 1\)/,
    );
  });

  it('rejects an empty file and a file over the line limit', () => {
    rejects('\n\n', null, /no requests/);
    assert.throws(
      () => parseBatchInput(`${embeddingLine(0)}\n${embeddingLine(1)}`, { maxLines: 1 }),
      /line 2: more than 1/,
    );
  });
});

describe('the body as written', () => {
  it('keeps each body as its source text: big integers, spacing, escapes, nested values', () => {
    const line =
      '{"custom_id":"a","method":"POST","url":"/v1/embeddings","body": {"model":"m","input":"say \\"}\\" [x]","seed":9007199254740993, "big":1e400,"n":{"a":[1,{"b":"]"}]}} }';
    const [parsed] = parseBatchInput(line);
    assert.equal(
      parsed!.raw,
      '{"model":"m","input":"say \\"}\\" [x]","seed":9007199254740993, "big":1e400,"n":{"a":[1,{"b":"]"}]}}',
    );
  });

  it('takes the last body when the name repeats, as JSON.parse does', () => {
    const line =
      '{"body":{"model":"first"},"custom_id":"a","method":"POST","url":"/v1/x","body":{"model":"last"}}';
    const [parsed] = parseBatchInput(line);
    assert.equal(parsed!.raw, '{"model":"last"}');
    assert.deepEqual(parsed!.body, { model: 'last' });
  });
});

describe('a body that names a field twice', () => {
  it('is sent serialised again (a node may keep the other copy)', () => {
    const line =
      '{"custom_id":"a","method":"POST","url":"/v1/x","body":{"stream":true,"stream":false,"m":1}}';
    const [parsed] = parseBatchInput(line);
    assert.equal(parsed!.raw, '{"stream":false,"m":1}');
  });
});
