/**
 * Finds and reads simulator profiles: a name resolves to `loadtest/profiles/NAME.yaml` under the repo
 * root, anything that looks like a path is read as given. Validation rules live in `profile.ts`.
 */

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, extname, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { SimProfileError, validateSimProfile, type SimProfile } from './profile.js';

/** Profile used when none is named. */
export const DEFAULT_PROFILE_NAME = 'llama-8b-h100-bf16';

const PROFILES_DIR = join('loadtest', 'profiles');

/**
 * The directory holding `loadtest/profiles`, under the Sluice root (`findSluiceRoot`: `$SLUICE_ROOT`,
 * else the nearest ancestor of this module, else of the working directory). Throws when none is found.
 */
export function findProfilesDir(): string {
  let root: string;
  try {
    root = findSluiceRoot();
  } catch (e) {
    throw new SimProfileError(`cannot find ${PROFILES_DIR}: ${(e as Error).message}`);
  }
  return join(root, PROFILES_DIR);
}

/** Names of the profiles shipped in `loadtest/profiles/` (without `.yaml`). */
export function listSimProfiles(): string[] {
  return readdirSync(findProfilesDir())
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => f.slice(0, -'.yaml'.length))
    .sort();
}

function looksLikePath(ref: string): boolean {
  return ref.includes('/') || ref.includes('\\') || extname(ref) === '.yaml' || extname(ref) === '.yml';
}

/**
 * Why `ref` names no profile shipped in `loadtest/profiles/` (listing those that are), or undefined
 * when it names one or is a path: a file is only read when the profile is loaded. Lets `sluice
 * check` refuse what startup would. Throws `SimProfileError` when the profiles cannot be found.
 */
export function unknownSimProfile(ref: string): string | undefined {
  if (looksLikePath(ref) || existsSync(join(findProfilesDir(), `${ref}.yaml`))) return undefined;
  return `unknown profile "${ref}" (available: ${listSimProfiles().join(', ')})`;
}

/**
 * Loads and validates a profile by name (`fast`) or by path (`./my.yaml`). A profile without a `name`
 * key is named after its file. Throws `SimProfileError` with the file and key on any problem.
 */
export function loadSimProfile(ref: string = DEFAULT_PROFILE_NAME): SimProfile {
  let file: string;
  if (looksLikePath(ref)) {
    file = resolve(ref);
  } else {
    const unknown = unknownSimProfile(ref);
    if (unknown !== undefined) throw new SimProfileError(unknown);
    file = join(findProfilesDir(), `${ref}.yaml`);
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new SimProfileError(`${file}: cannot read profile: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (err) {
    throw new SimProfileError(`${file}: invalid YAML: ${(err as Error).message}`);
  }
  const profile = validateSimProfile(parsed, file);
  if (!Object.hasOwn(parsed as object, 'name')) profile.name = basename(file, extname(file));
  return profile;
}

/**
 * Turns the fleet's `profile` option into a validated profile: a name or path is loaded, an object is
 * validated (missing keys take defaults), undefined loads the default profile.
 */
export function resolveSimProfile(input: string | Partial<SimProfile> | undefined): SimProfile {
  if (input === undefined) return loadSimProfile(DEFAULT_PROFILE_NAME);
  if (typeof input === 'string') return loadSimProfile(input);
  return validateSimProfile(input, 'inline profile');
}
