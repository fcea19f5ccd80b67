/**
 * Finds the Sluice install directory at startup, so that files shipped beside the code
 * (`config/schema.json`, `config/default.yaml`) are found whether the code runs from source, from
 * `dist/` or from a test build elsewhere. Synchronous file checks: startup only, never per request.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The file that marks the Sluice root. */
const MARKER = join('config', 'schema.json');

function walkUp(start: string): string | undefined {
  let dir = resolve(start);
  for (;;) {
    if (existsSync(join(dir, MARKER))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/**
 * Returns the directory that holds `config/schema.json`: `$SLUICE_ROOT` when set and valid, else
 * the nearest ancestor of this module's file, else of the working directory. Throws (fail fast at
 * startup) when none holds it, naming the places tried.
 */
export function findSluiceRoot(): string {
  const tried: string[] = [];
  const fromEnv = process.env['SLUICE_ROOT'];
  if (fromEnv !== undefined && fromEnv !== '') {
    if (existsSync(join(fromEnv, MARKER))) return resolve(fromEnv);
    tried.push(`$SLUICE_ROOT (${fromEnv})`);
  }
  const moduleDir = dirname(fileURLToPath(import.meta.url));
  const found = walkUp(moduleDir) ?? walkUp(process.cwd());
  if (found !== undefined) return found;
  tried.push(`${moduleDir} and its parents`, `${process.cwd()} and its parents`);
  throw new Error(
    `Sluice cannot find ${MARKER}; looked in ${tried.join(', ')}. Set SLUICE_ROOT to the install dir.`,
  );
}

/** Absolute path of the JSON Schema of config files. Throws like {@link findSluiceRoot}. */
export function schemaFilePath(): string {
  return join(findSluiceRoot(), MARKER);
}

/** Absolute path of the embedded default config that `npm start` runs. Throws like {@link findSluiceRoot}. */
export function defaultConfigPath(): string {
  return join(findSluiceRoot(), 'config', 'default.yaml');
}
