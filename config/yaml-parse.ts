/**
 * Turns config text into a YAML document, a plain-JS copy of it and the YAML-level errors (syntax,
 * duplicate keys, several documents), each with its line and column. Knows nothing about what a
 * Sluice config should contain.
 */
import { LineCounter, isCollection, isNode, parseDocument, visit, type YAMLError } from 'yaml';
import { formatConfigPath, type LocatedIssue } from './config-issue.js';
import { locatePath, pathAtOffset, type YamlSource } from './yaml-locate.js';

/** The result of reading config text as YAML. */
export interface ParsedYaml {
  source: YamlSource;
  /** Plain-JS copy of the document (mappings as objects); undefined when it could not be built. */
  data: unknown;
  /** YAML-level problems; when not empty, `data` should not be validated further. */
  errors: LocatedIssue[];
}

/** Aliases may be used, but a document that expands past this many is rejected ("billion laughs"). */
const MAX_ALIAS_COUNT = 100;

function yamlErrorToIssue(source: YamlSource, text: string, error: YAMLError): LocatedIssue {
  const offset = error.pos[0];
  const { line, col } = source.lineCounter.linePos(offset);
  switch (error.code) {
    case 'DUPLICATE_KEY': {
      const path = pathAtOffset(source, offset);
      const key = path.at(-1);
      const first = locatePath(source, path, 'key');
      const name = key === undefined ? text.slice(offset, error.pos[1]) : String(key);
      return {
        line,
        col,
        path: formatConfigPath(path),
        message: `duplicate key ${JSON.stringify(name)} (first given at line ${first.line}); each key may appear only once in a mapping`,
      };
    }
    case 'MULTIPLE_DOCS':
      return {
        line,
        col,
        path: '',
        message: "the file holds more than one YAML document ('---'); a Sluice config is a single document",
      };
    case 'TAB_AS_INDENT':
      return {
        line,
        col,
        path: '',
        message: 'tabs are not allowed for indentation in YAML; indent with spaces',
      };
    default:
      return { line, col, path: '', message: `invalid YAML: ${error.message}` };
  }
}

/**
 * Finds what YAML allows but a config cannot hold: a list or mapping used as a key, an alias with no
 * anchor before it (which would only fail when the document is turned into data, without a place),
 * and an alias inside the node it names (a cycle, which no validator could walk).
 */
function structureIssues(source: YamlSource): LocatedIssue[] {
  const issues: LocatedIssue[] = [];
  const at = (node: unknown, message: string, named = false): void => {
    const offset = isNode(node) ? (node.range?.[0] ?? 0) : 0;
    const { line, col } = source.lineCounter.linePos(offset);
    const path = named ? formatConfigPath(pathAtOffset(source, offset)) : '';
    issues.push({ line, col, path, message });
  };
  visit(source.doc, {
    Pair(_, pair) {
      if (isCollection(pair.key)) at(pair.key, 'a key must be a plain word, not a list or mapping');
    },
    Alias(_, alias, ancestors) {
      const target = alias.resolve(source.doc);
      if (target === undefined) {
        at(alias, `unknown alias *${alias.source}: no anchor &${alias.source} is defined before it`, true);
      } else if (ancestors.includes(target)) {
        at(alias, `alias *${alias.source} is inside the node it refers to; a config cannot contain itself`);
      }
    },
  });
  return issues;
}

/**
 * Copies the document's JS form so that every alias becomes its own copy: defaults the validator
 * inserts into one use of an anchored block must not appear in the others. Keys are defined as own
 * data properties, so a key named `__proto__` stays an ordinary (and unknown) key.
 */
function plainCopy(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plainCopy);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, plainCopy(item)]));
  }
  return value;
}

/**
 * Parses `text` as one YAML 1.2 document (core schema, unique keys). Warnings such as unresolved
 * tags count as errors: a config must mean one thing. Never throws.
 */
export function parseYaml(text: string): ParsedYaml {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const source: YamlSource = { doc, lineCounter };
  const errors = [...doc.errors, ...doc.warnings].map((error) => yamlErrorToIssue(source, text, error));
  if (errors.length === 0) errors.push(...structureIssues(source));
  if (errors.length > 0) return { source, data: undefined, errors };
  try {
    return { source, data: plainCopy(doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT })), errors };
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return {
      source,
      data: undefined,
      errors: [{ line: 1, col: 1, path: '', message: `invalid YAML: ${reason}` }],
    };
  }
}
