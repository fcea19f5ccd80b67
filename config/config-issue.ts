/**
 * The intermediate form of a config problem, before it has a file position: a path into the
 * document, which part of the YAML node it points at, and the message. Owns path formatting; knows
 * nothing about YAML or ajv.
 */

/** A path into the config document: mapping keys and sequence indexes, from the root. */
export type ConfigPath = readonly (string | number)[];

/**
 * Which part of the YAML the issue points at: the `key` of a mapping entry (unknown keys), or the
 * `value` (wrong types, bad values; for a missing key, the value is the parent mapping).
 */
export type IssueAnchor = 'key' | 'value';

/** One problem found in a config document, located by path. */
export interface ConfigIssue {
  path: ConfigPath;
  anchor: IssueAnchor;
  /** What was wrong and what was expected, without the path. */
  message: string;
}

/** A problem with its place in the file: 1-based line and column, and the formatted path. */
export interface LocatedIssue {
  line: number;
  col: number;
  /** Formatted path (`pools[0].url`); '' for the root or when no path applies. */
  path: string;
  message: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Formats a path the way operators read it: `pools[0].nodes[1].url`, with keys that are not
 * identifiers quoted (`match.headers["x-tenant"]`). The root is the empty string.
 */
export function formatConfigPath(path: ConfigPath): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) out += out === '' ? segment : `.${segment}`;
    else out += `[${JSON.stringify(segment)}]`;
  }
  return out;
}
