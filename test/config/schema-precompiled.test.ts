/**
 * The config schema's validator generated at build time (`config/schema-precompile.ts`): the build
 * wrote it and Sluice uses it; it accepts, fills in and rejects exactly as the schema compiled at
 * run time does, error for error; a generated module from another schema text, or none, is not
 * used.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ValidateFunction } from 'ajv';
import { precompileSchema } from '../../config/schema-precompile.js';
import {
  configSchemaValidatorSource,
  createSchemaAjv,
  loadPrecompiled,
  PRECOMPILED_FILE,
  schemaDigest,
} from '../../config/schema-validator.js';
import { findSluiceRoot, schemaFilePath } from '../../config/sluice-root.js';
import { parseYaml } from '../../config/yaml-parse.js';

/** Documents the schema rejects, one way each (types, unknown keys, patterns, anyOf, required). */
const INVALID = [
  'listeners: 3',
  'pools:\n  - name: gpu\n    nodes:\n      - url: ftp://x\n',
  'pools:\n  - name: gpu\n    nodez: []\n',
  'server:\n  workers: many\n',
  'server:\n  workers: 0\n',
  'routes:\n  - match: {}\n',
  'pools:\n  - name: gpu\n    balance:\n      policy: fastest\n    nodes:\n      - url: http://10.0.0.1:8000\n',
  'tenants:\n  - name: a\n    keys: [1, 2]\n',
  'admin:\n  port: 70000\n  token: ""\n',
];

/** The outcome of validating a copy of `data`: the verdict, the data with defaults, the errors. */
function outcome(validate: ValidateFunction, data: unknown): unknown {
  const copy = structuredClone(data);
  const ok = validate(copy);
  return { ok, copy, errors: validate.errors ?? null };
}

async function shippedDocuments(): Promise<{ name: string; data: unknown }[]> {
  const root = findSluiceRoot();
  const files = [join(root, 'config', 'default.yaml')];
  const examples = join(root, 'config', 'examples');
  for (const f of await readdir(examples)) if (f.endsWith('.yaml')) files.push(join(examples, f));
  const docs: { name: string; data: unknown }[] = [];
  for (const f of files) docs.push({ name: f, data: parseYaml(await readFile(f, 'utf8')).data });
  return docs;
}

describe('the config schema validator generated at build time', { timeout: 60_000 }, () => {
  let dir = '';
  let schemaText = '';
  let generated: ValidateFunction | null = null;
  let compiled: ValidateFunction | null = null;
  before(async () => {
    // Beside the build's own module, where the generated code finds ajv's runtime helpers.
    dir = await mkdtemp(join(dirname(PRECOMPILED_FILE), '.schema-test-'));
    schemaText = await readFile(schemaFilePath(), 'utf8');
    const file = join(dir, 'validate.cjs');
    await writeFile(file, precompileSchema(schemaText));
    generated = loadPrecompiled(file, schemaDigest(schemaText));
    compiled = createSchemaAjv().compile(JSON.parse(schemaText) as object);
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('is what the build wrote and what Sluice validates with', () => {
    assert.equal(loadPrecompiled(PRECOMPILED_FILE, schemaDigest(schemaText)) !== null, true);
    assert.equal(configSchemaValidatorSource(), 'precompiled');
  });

  it('accepts every shipped config and fills in the same defaults as the compiled schema', async () => {
    assert.ok(generated !== null && compiled !== null);
    const docs = await shippedDocuments();
    assert.ok(docs.length >= 5, `only ${docs.length} shipped configs found`);
    for (const d of docs) {
      const a = outcome(generated, d.data) as { ok: boolean };
      assert.equal(a.ok, true, `${d.name} rejected`);
      assert.deepEqual(a, outcome(compiled, d.data), d.name);
    }
  });

  it('rejects with the same errors, value and schema included, as the compiled schema', () => {
    assert.ok(generated !== null && compiled !== null);
    for (const yaml of INVALID) {
      const data = parseYaml(yaml).data;
      const a = outcome(generated, data) as { ok: boolean; errors: unknown[] | null };
      assert.equal(a.ok, false, `accepted: ${yaml}`);
      assert.ok((a.errors?.length ?? 0) > 0);
      assert.deepEqual(a, outcome(compiled, data), yaml);
    }
  });

  it('lets a process load and check a config without plugins without loading ajv itself', async () => {
    // A child process (this one has loaded ajv to compare with) running a script beside the build.
    const script = join(dir, 'parse-only.mjs');
    await writeFile(
      script,
      `import { createRequire } from 'node:module';
import { parseConfig } from '../loader.js';
const yaml = 'pools: [{ name: gpu, nodes: [{ url: "http://10.0.0.1:8000" }] }]\\nroutes: [{ name: all, match: {}, pool: gpu }]\\n';
const r = parseConfig(yaml, 'c.yaml');
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((f) => f.endsWith('/ajv/dist/ajv.js'));
console.log(JSON.stringify({ ok: r.ok, errors: r.ok ? [] : r.errors.map((e) => e.message), loaded }));
`,
    );
    const out = execFileSync(process.execPath, [script], { encoding: 'utf8', timeout: 20_000 });
    assert.deepEqual(JSON.parse(out), { ok: true, errors: [], loaded: [] });
  });

  it('is not used when it was generated from another schema text, nor when it is missing', async () => {
    const other = join(dir, 'other.cjs');
    await writeFile(other, precompileSchema(schemaText.replace('"Sluice configuration"', '"changed"')));
    assert.equal(loadPrecompiled(other, schemaDigest(schemaText)), null);
    assert.equal(loadPrecompiled(join(dir, 'missing.cjs'), schemaDigest(schemaText)), null);
  });
});
