/**
 * Plugins in the YAML: `sluice check` validates each instance's options against the plugin's own
 * schema and reports file:line:col; unknown plugins, unknown instances and modules that are not
 * plugins are reported where they are named; a module path resolves against the config file; the
 * example third-party plugin loads by path.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCheckCli } from '../../config/check-cli.js';
import { loadCheckedPlugins, loadConfigFile, formatConfigError } from '../../config/loader.js';
import { findSluiceRoot } from '../../config/sluice-root.js';

const HEAD = `pools:
  - name: gpu
    nodes:
      - url: http://127.0.0.1:9
`;

/** A config whose route runs the counter plugin from `module` (relative to the config), with `options`. */
function counterConfig(module: string, options = ''): string {
  return `${HEAD}plugins:
  - name: counter
    use: ${module}
${options}routes:
  - name: all
    pool: gpu
    plugins: [counter]
`;
}

async function check(dir: string, yaml: string): Promise<{ code: number; err: string }> {
  const file = join(dir, 'c.yaml');
  await writeFile(file, yaml);
  let err = '';
  const code = await runCheckCli([file], { stdout: () => undefined, stderr: (t) => void (err += t) });
  return { code, err: err.split(`${dir}/`).join('') };
}

describe('plugins in the config', { timeout: 30_000 }, () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-plugin-config-'));
    await copyFile(
      join(findSluiceRoot(), 'examples', 'plugins', 'tenant-counter.mjs'),
      join(dir, 'counter.mjs'),
    );
    await writeFile(join(dir, 'not-a-plugin.mjs'), 'export default { hello: 1 };\n');
    await writeFile(
      join(dir, 'no-schema.mjs'),
      "export default { name: 'no-schema', version: '1.0.0', create() { return {}; } };\n",
    );
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('reports bad options at their line and column, with the plugin schema’s words', async () => {
    const r = await check(
      dir,
      `${HEAD}plugins:
  - name: limits
    use: request-limits
    options:
      max_tokens: -5
      max_mesages: 3
routes:
  - name: all
    pool: gpu
    plugins: [limits]
`,
    );
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^c\.yaml:9:19 plugins\[0\]\.options\.max_tokens: expected an integer of at least 1, got -5$/m,
    );
    assert.match(
      r.err,
      /^c\.yaml:10:7 plugins\[0\]\.options\.max_mesages: unknown key "max_mesages" \(did you mean "max_messages"\?\)/m,
    );
  });

  it('names an unknown instance where a route lists it', async () => {
    const r = await check(
      dir,
      `${HEAD}plugins:
  - name: alias
    use: model-alias
    options: { aliases: [{ public: a, target: b }] }
routes:
  - name: all
    pool: gpu
    plugins: [alias, aliass]
`,
    );
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^c\.yaml:12:22 routes\[0\]\.plugins\[1\]: unknown plugin instance "aliass" \(did you mean "alias"\?\)/m,
    );
  });

  it('names an unknown plugin where its use is written', async () => {
    const r = await check(
      dir,
      `${HEAD}plugins:
  - name: alias
    use: model-alia
routes:
  - name: all
    pool: gpu
    plugins: [alias]
`,
    );
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^c\.yaml:7:10 plugins\[0\]\.use: unknown plugin "model-alia" \(did you mean "model-alias"\?\)/m,
    );
  });

  it('refuses a module that exports no plugin definition', async () => {
    const r = await check(
      dir,
      `${HEAD}plugins:
  - name: x
    use: ./not-a-plugin.mjs
routes:
  - name: all
    pool: gpu
`,
    );
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^c\.yaml:7:10 plugins\[0\]\.use: \.\/not-a-plugin\.mjs does not export a plugin definition/m,
    );
  });

  it('refuses options given to a plugin that declares no options schema, and takes it without', async () => {
    const yaml = (options: string): string => `${HEAD}plugins:
  - name: bare
    use: ./no-schema.mjs
${options}routes:
  - name: all
    pool: gpu
    plugins: [bare]
`;
    const r = await check(dir, yaml('    options: { foo: 1 }\n'));
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      /^c\.yaml:8:5 plugins\[0\]\.options: plugin no-schema takes no options \(it declares no options schema\)/m,
    );
    assert.equal((await check(dir, yaml(''))).code, 0);
    assert.equal((await check(dir, yaml('    options: {}\n'))).code, 0);
  });

  it('loads the example third-party plugin by a path relative to the config, with its defaults', async () => {
    const file = join(dir, 'ok.yaml');
    await writeFile(file, counterConfig('./counter.mjs'));
    const r = await loadConfigFile(file);
    if (!r.ok) assert.fail(r.errors.map(formatConfigError).join('\n'));
    assert.equal(r.plugins?.[0]?.definition.name, 'tenant-counter');
    assert.deepEqual(r.plugins?.[0]?.config.options, { header: 'x-tenant-requests', ttl_ms: 0 });
    assert.equal(r.config.plugins[0]?.timeout_ms, 1000);
    assert.equal(r.config.plugins[0]?.fail_open, false);
  });

  it('a worker thread loads the plugins of the checked config again, and names a module it cannot load', async () => {
    await copyFile(join(dir, 'counter.mjs'), join(dir, 'counter-copy.mjs'));
    const file = join(dir, 'checked.yaml');
    await writeFile(file, counterConfig('./counter-copy.mjs', '    options:\n      ttl_ms: 5\n'));
    const r = await loadConfigFile(file);
    if (!r.ok) assert.fail(r.errors.map(formatConfigError).join('\n'));
    // What a worker receives is a copy of the main thread's config, never the file.
    const copy = structuredClone(r.config);
    const again = await loadCheckedPlugins(copy, file);
    if (!again.ok) assert.fail(again.errors.join('\n'));
    assert.equal(again.plugins[0]?.definition.name, 'tenant-counter');
    assert.deepEqual(again.plugins[0]?.config.options, { header: 'x-tenant-requests', ttl_ms: 5 });
    // The module gone since the main thread loaded it: the worker's error names the instance.
    await rename(join(dir, 'counter-copy.mjs'), join(dir, 'counter-moved.mjs'));
    const gone = await loadCheckedPlugins(structuredClone(r.config), file);
    assert.equal(gone.ok, false);
    if (gone.ok) return;
    assert.equal(gone.errors.length, 1);
    assert.match(gone.errors[0]!, /checked\.yaml plugins\[0\]\.use: .*counter-copy\.mjs/);
  });
});
