/**
 * Maps config paths to places in the YAML text and back, over a parsed `yaml` Document and its
 * LineCounter. Reads the document only; never changes it and never decides what is an error.
 */
import { isAlias, isMap, isNode, isScalar, isSeq, type Document, type LineCounter, type Node } from 'yaml';
import type { ConfigPath, IssueAnchor } from './config-issue.js';

/** A parsed YAML document together with the line table of its text. */
export interface YamlSource {
  doc: Document;
  lineCounter: LineCounter;
}

/** 1-based line and column. */
export interface SourcePosition {
  line: number;
  col: number;
}

const FILE_START: SourcePosition = { line: 1, col: 1 };

/** Follows an alias to the node it names; a path through `*anchor` continues in the anchored node. */
function resolveNode(source: YamlSource, value: unknown): Node | null {
  if (isAlias(value)) return value.resolve(source.doc) ?? null;
  return isNode(value) ? value : null;
}

function keyText(key: unknown): string | undefined {
  if (isScalar(key)) return String(key.value);
  return typeof key === 'string' ? key : undefined;
}

/** Where a node starts, or undefined for a node without source text (an empty value like `admin:`). */
function startOf(source: YamlSource, node: Node | null): SourcePosition | undefined {
  if (node === null || node.range === undefined || node.range === null) return undefined;
  const [start, valueEnd] = node.range;
  if (isScalar(node) && node.value === null && start === valueEnd) return undefined;
  return source.lineCounter.linePos(start);
}

interface Walk {
  /** How many path segments were found in the document. */
  matched: number;
  node: Node | null;
  /** The key node of the last mapping entry walked through, if the last step was a mapping. */
  key: Node | null;
  /** Position of the deepest node found, for paths that leave the document. */
  deepest: SourcePosition;
}

function walk(source: YamlSource, path: ConfigPath): Walk {
  let node = resolveNode(source, source.doc.contents);
  let key: Node | null = null;
  let deepest = startOf(source, node) ?? FILE_START;
  let matched = 0;
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((item) => keyText(item.key) === String(segment));
      if (pair === undefined) break;
      key = isNode(pair.key) ? pair.key : null;
      node = resolveNode(source, pair.value);
    } else if (isSeq(node) && typeof segment === 'number') {
      const item: unknown = node.items[segment];
      if (item === undefined) break;
      key = null;
      node = resolveNode(source, item);
    } else {
      break;
    }
    matched++;
    deepest = startOf(source, node) ?? startOf(source, key) ?? deepest;
  }
  return { matched, node, key, deepest };
}

/**
 * Where an issue at `path` should point: the key itself for `key`, else the value (an empty value
 * points at its key). A path that leaves the document (a key filled in by a default) points at the
 * deepest part of it that exists; an empty document at 1:1.
 */
export function locatePath(source: YamlSource, path: ConfigPath, anchor: IssueAnchor): SourcePosition {
  const found = walk(source, path);
  if (found.matched < path.length) return found.deepest;
  const keyPos = startOf(source, found.key);
  if (anchor === 'key' && keyPos !== undefined) return keyPos;
  return startOf(source, found.node) ?? keyPos ?? found.deepest;
}

/** True when every segment of `path` is written in the file (as opposed to filled in by a default). */
export function hasPath(source: YamlSource, path: ConfigPath): boolean {
  return walk(source, path).matched === path.length;
}

function contains(node: Node | null, offset: number): boolean {
  const range = node?.range;
  return (
    range !== undefined && range !== null && range[0] <= offset && offset < Math.max(range[1], range[0] + 1)
  );
}

/**
 * The path of the innermost mapping key or value that covers `offset` in the text; used to name the
 * place of YAML-level errors (a duplicate key) that only come with an offset.
 */
export function pathAtOffset(source: YamlSource, offset: number): ConfigPath {
  const path: (string | number)[] = [];
  let node: unknown = source.doc.contents;
  for (;;) {
    if (isMap(node)) {
      const pair = node.items.find(
        (item) =>
          contains(isNode(item.key) ? item.key : null, offset) ||
          contains(isNode(item.value) ? item.value : null, offset),
      );
      const key = pair === undefined ? undefined : keyText(pair.key);
      if (pair === undefined || key === undefined) return path;
      path.push(key);
      if (isNode(pair.key) && contains(pair.key, offset)) return path;
      node = pair.value;
    } else if (isSeq(node)) {
      const index = node.items.findIndex((item) => isNode(item) && contains(item, offset));
      if (index < 0) return path;
      path.push(index);
      node = node.items[index];
    } else {
      return path;
    }
  }
}
