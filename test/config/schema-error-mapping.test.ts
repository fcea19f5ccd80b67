/**
 * mapSchemaErrors on schemas built for the test: the noise rules hold for keywords the Sluice
 * schema does not use today (oneOf cascades), so a future schema change keeps messages clean.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Ajv } from 'ajv';
import { mapSchemaErrors } from '../../config/schema-errors.js';

function issuesFor(schema: object, data: unknown): { path: string; message: string }[] {
  const validate = new Ajv({ allErrors: true, verbose: true }).compile(schema);
  assert.equal(validate(data), false);
  return mapSchemaErrors(validate.errors ?? [], data).map((i) => ({
    path: i.path.join('.'),
    message: i.message,
  }));
}

void describe('mapSchemaErrors', () => {
  void it('drops a oneOf error that its branches already explain', () => {
    const schema = {
      type: 'object',
      properties: {
        limit: {
          oneOf: [
            { type: 'integer', minimum: 1 },
            { type: 'string', enum: ['none'] },
          ],
        },
      },
    };
    const issues = issuesFor(schema, { limit: 0 });
    assert.ok(issues.length > 0);
    assert.ok(
      issues.every((i) => !i.message.includes('oneOf') && !i.message.includes('must match exactly one')),
    );
  });

  void it('keeps a wrapper error when nothing else explains the failure', () => {
    const schema = { type: 'object', properties: { a: { not: { type: 'string' } } } };
    assert.deepEqual(issuesFor(schema, { a: 'x' }), [{ path: 'a', message: 'must NOT be valid' }]);
  });

  void it('states a one-sided bound in words', () => {
    const schema = { type: 'array', items: { type: 'integer', maximum: 3 } };
    assert.deepEqual(issuesFor(schema, [1, 9]), [
      { path: '1', message: 'expected an integer of at most 3, got 9' },
    ]);
  });
});
