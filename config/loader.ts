/**
 * Loads a Sluice config file: YAML → schema (with defaults) → semantic checks → normalised
 * `SluiceConfig`, or every problem found, each with file, line, column and path. Startup and reload
 * only; the request path never calls into this module.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { loadPlugins, type LoadedPlugin } from '../proxy/plugin/plugin-loader.js';
import { formatConfigPath, type ConfigIssue, type LocatedIssue } from './config-issue.js';
import { normalizeConfig } from './normalize.js';
import { mapSchemaErrors } from './schema-errors.js';
import { configSchemaValidator } from './schema-validator.js';
import { checkSemantics } from './semantic-checks.js';
import type { SluiceConfig } from './types.js';
import { hasPath, locatePath, type YamlSource } from './yaml-locate.js';
import { parseYaml } from './yaml-parse.js';

/**
 * One problem in a config file. `line` and `col` point at the offending node: the key for unknown
 * keys, the parent mapping for missing keys, else the value.
 */
export interface ConfigError extends LocatedIssue {
  file: string;
}

/**
 * The outcome of loading: a valid, defaults-applied config with the sha256 (hex) of the file text
 * (and, from `loadConfigFile`, its plugins loaded with their options checked), or the errors,
 * sorted by position (never empty).
 */
export type LoadResult =
  | { ok: true; config: SluiceConfig; digest: string; plugins?: LoadedPlugin[] }
  | { ok: false; errors: ConfigError[] };

function byPosition(a: LocatedIssue, b: LocatedIssue): number {
  return a.line - b.line || a.col - b.col;
}

function locate(source: YamlSource, file: string, issue: ConfigIssue): ConfigError {
  const { line, col } = locatePath(source, issue.path, issue.anchor);
  return { file, line, col, path: formatConfigPath(issue.path), message: issue.message };
}

/**
 * Parses and validates config `text`; `file` only names the source in errors. Pure and synchronous:
 * it reads nothing, and the same text always gives the same result. Never throws on bad input.
 *
 * @example
 * const result = parseConfig(readFileSync('sluice.yaml', 'utf8'), 'sluice.yaml');
 * if (!result.ok) for (const e of result.errors) console.error(formatConfigError(e));
 */
export function parseConfig(text: string, file: string): LoadResult {
  return parseWithSource(text, file).result;
}

function parseWithSource(text: string, file: string): { result: LoadResult; source: YamlSource } {
  const parsed = parseYaml(text);
  return { result: parseParsed(parsed, text, file), source: parsed.source };
}

function parseParsed(parsed: ReturnType<typeof parseYaml>, text: string, file: string): LoadResult {
  if (parsed.errors.length > 0) {
    return { ok: false, errors: parsed.errors.map((issue) => ({ file, ...issue })).sort(byPosition) };
  }
  const data = parsed.data;
  const validate = configSchemaValidator();
  const schemaIssues = validate(data) ? [] : mapSchemaErrors(validate.errors ?? [], data);
  // A value the schema already rejected gets no second complaint from the semantic rules.
  const rejected = new Set(schemaIssues.map((issue) => formatConfigPath(issue.path)));
  const semanticIssues = checkSemantics(data, { has: (path) => hasPath(parsed.source, path) }).filter(
    (issue) => !rejected.has(formatConfigPath(issue.path)),
  );
  const issues = [...schemaIssues, ...semanticIssues];
  if (issues.length > 0) {
    return { ok: false, errors: issues.map((issue) => locate(parsed.source, file, issue)).sort(byPosition) };
  }
  const config = normalizeConfig(data as SluiceConfig);
  return { ok: true, config, digest: createHash('sha256').update(text).digest('hex') };
}

/**
 * Reads `file` (UTF-8), parses it with {@link parseConfig}, then loads the plugins it names
 * (module paths relative to the file) and checks their options against their own schemas, and checks
 * that a simulator profile given by name exists. A missing
 * or unreadable file is reported as one error at 1:1 carrying the operating system's reason; never
 * rejects.
 */
export async function loadConfigFile(file: string): Promise<LoadResult> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return {
      ok: false,
      errors: [{ file, line: 1, col: 1, path: '', message: `cannot read the config file: ${reason}` }],
    };
  }
  return loadConfigText(text, file);
}

/**
 * Parses config `text` read from `file` (a reload that read it itself), loads the plugins it names
 * and checks the simulator profile, as {@link loadConfigFile} does after reading. Never rejects.
 */
export async function loadConfigText(text: string, file: string): Promise<LoadResult> {
  const { result, source } = parseWithSource(text, file);
  if (!result.ok) return result;
  const loaded = await loadPlugins(result.config.plugins, dirname(resolve(file)));
  const issues = [...(await simulatorIssues(result.config)), ...loaded.issues];
  if (issues.length > 0) {
    return { ok: false, errors: issues.map((issue) => locate(source, file, issue)).sort(byPosition) };
  }
  return { ...result, plugins: loaded.plugins };
}

/**
 * Loads the plugins of `config`, a config another thread of this process has loaded and checked
 * (`server.workers`): the file is neither parsed nor validated again (a worker thread never compiles
 * the schema), and the plugin modules and their options are loaded as {@link loadConfigText} does.
 * Resolves to the plugins or to one message per problem; never rejects.
 */
export async function loadCheckedPlugins(
  config: SluiceConfig,
  file: string,
): Promise<{ ok: true; plugins: LoadedPlugin[] } | { ok: false; errors: string[] }> {
  const loaded = await loadPlugins(config.plugins, dirname(resolve(file)));
  if (loaded.issues.length === 0) return { ok: true, plugins: loaded.plugins };
  return {
    ok: false,
    errors: loaded.issues.map((issue) => `${file} ${formatConfigPath(issue.path)}: ${issue.message}`),
  };
}

/**
 * The simulator's profile, when given by name, is one of those shipped with Sluice (a profile given
 * by path is a file read at startup, like a certificate). The simulator's code is imported only for
 * a config that has one.
 */
async function simulatorIssues(config: SluiceConfig): Promise<ConfigIssue[]> {
  if (config.simulator === undefined) return [];
  const { unknownSimProfile } = await import('../loadtest/sim/profile-loader.js');
  let message: string | undefined;
  try {
    message = unknownSimProfile(config.simulator.profile);
  } catch (error) {
    message = error instanceof Error ? error.message : String(error);
  }
  return message === undefined ? [] : [{ path: ['simulator', 'profile'], anchor: 'value', message }];
}

/**
 * One line per error, compiler style: `my.yaml:12:7 pools[0].nodes[1].url: must be a base URL like
 * http://10.0.0.7:8000 (got "ftp://x")`. Errors at the root have no path part.
 */
export function formatConfigError(e: ConfigError): string {
  const where = `${e.file}:${e.line}:${e.col}`;
  return e.path === '' ? `${where} ${e.message}` : `${where} ${e.path}: ${e.message}`;
}
