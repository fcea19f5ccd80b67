/**
 * Loads `config/schema.json` and compiles it with ajv into the validator that also fills in
 * defaults, on first use. Startup and reload only: nothing here runs on the request path. A worker
 * thread of `server.workers` never compiles it (it runs the config the main thread checked): the
 * compiled schema holds about 20 MiB, which each thread would pay again.
 */
import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import { schemaFilePath } from './sluice-root.js';

/**
 * Creates the ajv instance the config schema is compiled with: every error reported (not just the
 * first), defaults inserted into the data, failing values and schemas kept on errors for messages.
 * `patternErrorMessage` is the editors' (VS Code, yaml-language-server) annotation for a readable
 * pattern message; ajv only needs to know it. `anyOfMessage` is Sluice's own: the one message for a
 * value that matches none of the forms an `anyOf` allows (`schema-errors.ts`).
 */
function createAjv(): Ajv {
  const ajv = new Ajv({ allErrors: true, useDefaults: true, verbose: true, strict: true });
  ajv.addKeyword('patternErrorMessage');
  ajv.addKeyword('anyOfMessage');
  return ajv;
}

function compileSchema(): ValidateFunction {
  const file = schemaFilePath();
  const schema = JSON.parse(readFileSync(file, 'utf8')) as object;
  return createAjv().compile(schema);
}

let compiled: ValidateFunction | null = null;

/**
 * The compiled config schema (compiled by the first call). Call it on a plain-JS copy of the
 * document: it fills in defaults in place, returns true when the data is valid, and leaves the
 * errors in its `errors`.
 */
export function configSchemaValidator(): ValidateFunction {
  compiled ??= compileSchema();
  return compiled;
}
