/**
 * Turns ajv's errors into short human messages ("expected an integer from 0 to 65535, got \"80a\"")
 * at the right path, dropping the duplicates and cascades ajv reports with `allErrors`. Knows the
 * schema keywords Sluice uses; knows nothing about YAML positions.
 */
import type { ErrorObject } from 'ajv';
import type { ConfigIssue, ConfigPath } from './config-issue.js';
import { suggestClosest } from './suggest.js';

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function num(schema: Json, key: string): number | undefined {
  const value = schema[key];
  return typeof value === 'number' ? value : undefined;
}

function param(error: ErrorObject, key: string): unknown {
  return (error.params as Json)[key];
}

/** Decodes a JSON Pointer (`/pools/0/nodes`) into a path, reading the data to tell indexes from keys. */
function pointerToPath(pointer: string, data: unknown): (string | number)[] {
  const path: (string | number)[] = [];
  if (pointer === '') return path;
  let current: unknown = data;
  for (const raw of pointer.slice(1).split('/')) {
    const segment = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(current)) {
      const index = Number(segment);
      path.push(index);
      current = current[index];
    } else {
      path.push(segment);
      current = isRecord(current) ? current[segment] : undefined;
    }
  }
  return path;
}

const MAX_SHOWN = 60;

/** How a value given in the file reads in a message: strings quoted, collections by kind. */
function describeValue(value: unknown): string {
  if (value === null || value === undefined) return 'an empty value';
  if (typeof value === 'string') {
    const shown = value.length > MAX_SHOWN ? `${value.slice(0, MAX_SHOWN)}…` : value;
    return JSON.stringify(shown);
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return Array.isArray(value) ? 'a list' : 'a mapping';
}

/** Keys whose values are credentials: an error about one never quotes it. */
const SECRET_KEY = /(^|_)(sha256|token|password|secret|api_key|authorization)$/i;

/**
 * `describeValue` for the value at `path`, without the secrets it may hold: the value of a
 * credential's key (`admin.token.sha256`, a plugin's `*_secret`, a pool's `request_headers`) is not
 * shown, and the password of a URL is masked, so that a config error, logged or returned by a
 * reload, does not leak what `/admin/config` masks.
 */
function describeValueAt(value: unknown, path: ConfigPath): string {
  const key = path[path.length - 1];
  const inHeaders = path.includes('request_headers');
  if (typeof value === 'string' && ((typeof key === 'string' && SECRET_KEY.test(key)) || inHeaders))
    return 'a value not shown here (it may be a secret)';
  return describeValue(typeof value === 'string' ? maskUrlPasswords(value) : value);
}

/** `text` with the password of every URL in it (`scheme://user:password@`) shown as `****`. */
export function maskUrlPasswords(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/*[^/@:\s]*:)[^@\s]*@/gi, '$1****@');
}

function describeRange(noun: string, min: number | undefined, max: number | undefined): string {
  if (min !== undefined && max !== undefined) return `${noun} from ${min} to ${max}`;
  if (min !== undefined) return `${noun} of at least ${min}`;
  if (max !== undefined) return `${noun} of at most ${max}`;
  return noun;
}

/** What a schema accepts, as a noun phrase: "an integer from 0 to 65535", "a mapping". */
function describeExpected(schema: Json): string {
  const values = schema['enum'];
  if (Array.isArray(values)) return `one of: ${values.map(String).join(', ')}`;
  switch (schema['type']) {
    case 'integer':
      return describeRange('an integer', num(schema, 'minimum'), num(schema, 'maximum'));
    case 'number':
      return describeRange('a number', num(schema, 'minimum'), num(schema, 'maximum'));
    case 'string':
      return 'a string';
    case 'boolean':
      return 'true or false';
    case 'array':
      return 'a list';
    case 'object':
      return 'a mapping';
    default:
      return 'a different value';
  }
}

function typeMessage(schema: Json, value: unknown, path: ConfigPath): string {
  if (path.length === 0) {
    if (value === null || value === undefined) {
      return 'the file is empty: a Sluice config is a mapping that needs at least pools and routes';
    }
    return `expected a mapping of config keys (pools, routes, ...), got ${describeValue(value)}`;
  }
  const expected = describeExpected(schema);
  const hint =
    (value === null || value === undefined) && schema['type'] === 'object'
      ? ' (write {} for an empty mapping)'
      : '';
  return `expected ${expected}, got ${describeValueAt(value, path)}${hint}`;
}

function unknownKeyMessage(key: string, schema: Json): string {
  const properties = schema['properties'];
  const allowed = isRecord(properties) ? Object.keys(properties) : [];
  if (key === '<<') {
    return 'merge keys ("<<") are not supported (YAML 1.2); repeat the keys, or alias the whole block';
  }
  const closest = suggestClosest(key, allowed);
  const suggestion = closest === undefined ? '' : ` (did you mean ${JSON.stringify(closest)}?)`;
  const list = allowed.length === 0 ? 'none' : allowed.join(', ');
  return `unknown key ${JSON.stringify(key)}${suggestion}; allowed keys: ${list}`;
}

function quoteList(names: readonly string[]): string {
  const quoted = names.map((name) => JSON.stringify(name));
  if (quoted.length <= 1) return quoted.join('');
  return `${quoted.slice(0, -1).join(', ')} and ${quoted.at(-1) ?? ''}`;
}

/** Keywords that only wrap the errors of their subschemas; reported only when nothing better is. */
const WRAPPERS = new Set(['propertyNames', 'if', 'then', 'else', 'anyOf', 'oneOf', 'allOf', 'not']);

/**
 * The issue for one ajv error of a keyword that stands on its own (not `required`, not a wrapper),
 * or undefined for keywords without a message of their own.
 */
function issueFor(error: ErrorObject, schema: Json, path: ConfigPath): ConfigIssue | undefined {
  const at = (message: string): ConfigIssue => ({ path, anchor: 'value', message });
  const got = describeValueAt(error.data, path);
  switch (error.keyword) {
    case 'type':
      return at(typeMessage(schema, error.data, path));
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return at(`expected ${describeExpected(schema)}, got ${got}`);
    case 'additionalProperties': {
      const key = String(param(error, 'additionalProperty'));
      return { path: [...path, key], anchor: 'key', message: unknownKeyMessage(key, schema) };
    }
    case 'enum': {
      const allowed = param(error, 'allowedValues');
      const list = Array.isArray(allowed) ? allowed.map(String) : [];
      const closest = typeof error.data === 'string' ? suggestClosest(error.data, list) : undefined;
      const suggestion = closest === undefined ? '' : `; did you mean ${JSON.stringify(closest)}?`;
      return at(`must be one of: ${list.join(', ')} (got ${got}${suggestion})`);
    }
    case 'const':
      return at(`must be ${JSON.stringify(param(error, 'allowedValue'))} (got ${got})`);
    case 'pattern': {
      const custom = schema['patternErrorMessage'];
      const text =
        typeof custom === 'string' ? custom : `must match the pattern ${String(param(error, 'pattern'))}`;
      // Under propertyNames the failing value is a key of the mapping at `path`: point at that key.
      const key = error.propertyName;
      if (key !== undefined)
        return { path: [...path, key], anchor: 'key', message: `${text} (got ${describeValue(key)})` };
      return at(`${text} (got ${got})`);
    }
    case 'minItems': {
      const limit = Number(param(error, 'limit'));
      const what = limit === 1 ? 'at least one entry' : `at least ${limit} entries`;
      return at(`must list ${what} (got ${describeListSize(error.data)})`);
    }
    case 'maxItems':
      return at(`must list at most ${String(param(error, 'limit'))} entries`);
    case 'uniqueItems': {
      const later = Math.max(Number(param(error, 'i')), Number(param(error, 'j')));
      const item: unknown = Array.isArray(error.data) ? error.data[later] : undefined;
      const message = `${describeValue(item)} is listed twice; each entry may appear only once`;
      return { path: [...path, later], anchor: 'value', message };
    }
    case 'minLength':
      return at('must not be empty');
    case 'maxLength':
      return at(`must be at most ${String(param(error, 'limit'))} characters long`);
    default:
      return WRAPPERS.has(error.keyword)
        ? undefined
        : at(error.message ?? `fails the rule "${error.keyword}"`);
  }
}

/**
 * Maps the errors of one failed validation of `data` to config issues, in ajv's order. Needs an
 * ajv compiled with `verbose` (for `data` and `parentSchema`) and `allErrors`. Rules against noise:
 * several missing keys of one mapping make one issue; a wrong type hides the other complaints about
 * the same value; wrapper keywords (`oneOf`, `propertyNames`, ...) appear only when no nested error
 * explains them; exact repeats are dropped.
 */
export function mapSchemaErrors(errors: readonly ErrorObject[], data: unknown): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  const seen = new Set<string>();
  // A value that matches none of an `anyOf`'s forms, where the schema words that in one message
  // (`anyOfMessage`), gets that message alone, not one complaint per form: the errors of the
  // forms (below the `anyOf` in the schema, at the same value) give way to it.
  const summaries = errors.filter(
    (e) =>
      e.keyword === 'anyOf' &&
      e.propertyName === undefined &&
      isRecord(e.parentSchema) &&
      typeof e.parentSchema['anyOfMessage'] === 'string',
  );
  const summaryOf = (e: ErrorObject): ErrorObject | undefined =>
    e.propertyName !== undefined
      ? undefined
      : summaries.find(
          (s) =>
            s.instancePath === e.instancePath && (s === e || e.schemaPath.startsWith(`${s.schemaPath}/`)),
        );
  const typeErrorPointers = new Set(errors.filter((e) => e.keyword === 'type').map((e) => e.instancePath));
  const missing = new Map<string, { issue: ConfigIssue; names: string[] }>();

  for (const error of errors) {
    const schema: Json = isRecord(error.parentSchema) ? error.parentSchema : {};
    const path = pointerToPath(error.instancePath, data);
    const valueHasTypeError = error.propertyName === undefined && typeErrorPointers.has(error.instancePath);
    const summary = summaryOf(error);
    if (summary !== undefined) {
      if (error !== summary) continue;
      const message = String((summary.parentSchema as Json)['anyOfMessage']);
      issues.push({
        path,
        anchor: 'value',
        message: `${message} (got ${describeValueAt(error.data, path)})`,
      });
      continue;
    }
    if (error.keyword !== 'type' && valueHasTypeError) continue;

    if (error.keyword === 'required') {
      let entry = missing.get(error.instancePath);
      if (entry === undefined) {
        entry = { issue: { path, anchor: 'value', message: '' }, names: [] };
        missing.set(error.instancePath, entry);
        issues.push(entry.issue);
      }
      entry.names.push(String(param(error, 'missingProperty')));
      entry.issue.message = `missing required ${entry.names.length === 1 ? 'key' : 'keys'} ${quoteList(entry.names)}`;
      continue;
    }

    let issue = issueFor(error, schema, path);
    if (issue === undefined) {
      const explained = errors.some(
        (other) => !WRAPPERS.has(other.keyword) && other.instancePath.startsWith(error.instancePath),
      );
      if (explained) continue;
      issue = { path, anchor: 'value', message: error.message ?? 'does not match any allowed form' };
    }
    const id = `${issue.anchor}\u0000${issue.path.join('\u0000')}\u0000${issue.message}`;
    if (seen.has(id)) continue;
    seen.add(id);
    issues.push(issue);
  }
  return issues;
}

function describeListSize(value: unknown): string {
  if (!Array.isArray(value)) return describeValue(value);
  return value.length === 0 ? 'an empty list' : `${value.length}`;
}
