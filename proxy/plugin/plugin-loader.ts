/**
 * Loads the plugins a config names and checks their options: resolves each instance's `use` to a
 * first-party plugin or a module file (relative to the config file), checks that the module exports
 * a plugin definition, and validates `options` against the plugin's JSON Schema (defaults filled
 * in). Problems come back as config issues, so `sluice check`, startup and reload report them with
 * file:line:col like any other. Startup and reload only; never on the request path.
 */
import { stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Ajv, ValidateFunction } from 'ajv';
import { newAjv } from '../../config/ajv-on-demand.js';
import { pluginDefinitionProblem, type PluginDefinition } from '../../plugins/api.js';
import { BUILTIN_PLUGINS } from '../../plugins/index.js';
import type { ConfigIssue } from '../../config/config-issue.js';
import { mapSchemaErrors } from '../../config/schema-errors.js';
import { suggestClosest } from '../../config/suggest.js';
import type { PluginInstanceConfig } from '../../config/types.js';

/** One instance ready to be created: its config (options validated, defaults in) and definition. */
export interface LoadedPlugin {
  config: PluginInstanceConfig;
  definition: PluginDefinition<never>;
}

/** The outcome: the loaded instances, or the issues (paths into the config document). */
export interface PluginLoadResult {
  plugins: LoadedPlugin[];
  issues: ConfigIssue[];
}

/** The ajv that compiles plugins' option schemas, made for the first plugin that has one. */
let ajv: Ajv | null = null;
const validators = new WeakMap<object, ValidateFunction>();

function isPath(use: string): boolean {
  return use.startsWith('./') || use.startsWith('../') || isAbsolute(use);
}

async function importDefinition(use: string, configDir: string): Promise<unknown> {
  const builtin = BUILTIN_PLUGINS[use];
  if (builtin !== undefined) return builtin();
  const file = resolve(configDir, use);
  const info = await stat(file).catch(() => null);
  if (info === null || !info.isFile()) throw new Error(`no plugin module at ${file}`);
  // The modification time in the URL makes a reload pick up a changed module (ESM caches by URL).
  const mod = (await import(`${pathToFileURL(file).href}?v=${info.mtimeMs}`)) as Record<string, unknown>;
  return mod['default'] ?? mod['plugin'];
}

function validatorFor(definition: PluginDefinition<never>): ValidateFunction | null {
  const schema = definition.options;
  if (schema === undefined) return null;
  let v = validators.get(schema);
  if (v === undefined) {
    // A module imported again (it changed) brings a new schema object under the same `$id`: the
    // shared Ajv would refuse it as a duplicate, so the earlier one goes first.
    ajv ??= newAjv({ allErrors: true, useDefaults: true, verbose: true, strict: false });
    const id = (schema as { $id?: unknown }).$id;
    if (typeof id === 'string' && ajv.getSchema(id) !== undefined) ajv.removeSchema(id);
    v = ajv.compile(schema);
    validators.set(schema, v);
  }
  return v;
}

/**
 * Loads and checks every instance of `configs`; `configDir` resolves module paths. Never rejects:
 * a missing module, a module without a definition or a bad options schema becomes an issue at the
 * instance's `use`, invalid options issues inside `options`.
 */
export async function loadPlugins(
  configs: readonly PluginInstanceConfig[],
  configDir: string,
): Promise<PluginLoadResult> {
  const plugins: LoadedPlugin[] = [];
  const issues: ConfigIssue[] = [];
  for (const [index, c] of configs.entries()) {
    const use = c.use ?? c.name;
    const usePath = c.use === undefined ? ['plugins', index, 'name'] : ['plugins', index, 'use'];
    if (!isPath(use) && BUILTIN_PLUGINS[use] === undefined) {
      const names = Object.keys(BUILTIN_PLUGINS);
      const closest = suggestClosest(use, names);
      const hint = closest === undefined ? '' : ` (did you mean ${JSON.stringify(closest)}?)`;
      issues.push({
        path: usePath,
        anchor: 'value',
        message: `unknown plugin ${JSON.stringify(use)}${hint}; first-party plugins: ${names.join(', ')}; a module path starts with ./ or ../`,
      });
      continue;
    }
    let definition: unknown;
    try {
      definition = await importDefinition(use, configDir);
    } catch (e) {
      issues.push({
        path: usePath,
        anchor: 'value',
        message: `cannot load plugin ${JSON.stringify(use)}: ${e instanceof Error ? e.message : String(e)}`,
      });
      continue;
    }
    const problem = pluginDefinitionProblem(definition);
    if (problem !== null) {
      issues.push({
        path: usePath,
        anchor: 'value',
        message: `${use} does not export a plugin definition (default or "plugin" export): ${problem}`,
      });
      continue;
    }
    const def = definition as PluginDefinition<never>;
    let validate: ValidateFunction | null;
    try {
      validate = validatorFor(def);
    } catch (e) {
      issues.push({
        path: usePath,
        anchor: 'value',
        message: `plugin ${def.name} has an invalid options schema: ${e instanceof Error ? e.message : String(e)}`,
      });
      continue;
    }
    const options = c.options ?? {};
    if (validate === null && Object.keys(options).length > 0) {
      // A plugin without a schema takes no options (api.ts): ones given to it would be ignored.
      issues.push({
        path: ['plugins', index, 'options'],
        anchor: 'key',
        message: `plugin ${def.name} takes no options (it declares no options schema); remove them`,
      });
      continue;
    }
    if (validate !== null && !validate(options)) {
      for (const issue of mapSchemaErrors(validate.errors ?? [], options)) {
        issues.push({ ...issue, path: ['plugins', index, 'options', ...issue.path] });
      }
      continue;
    }
    plugins.push({ config: { ...c, use, options }, definition: def });
  }
  return { plugins, issues };
}
