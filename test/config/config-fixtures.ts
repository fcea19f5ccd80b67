/**
 * Shared helpers for the config tests: build YAML text line by line (so expected line numbers are
 * visible in the test), and unwrap load results with a clear failure when the outcome is wrong.
 */
import assert from 'node:assert/strict';
import { formatConfigError, parseConfig, type ConfigError } from '../../config/loader.js';
import type { SluiceConfig } from '../../config/types.js';

/** Joins lines into YAML text; line N of the result is argument N. */
export function yamlLines(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

/** Parses `text` and returns the config, failing the test with the formatted errors if invalid. */
export function configOf(text: string): SluiceConfig {
  const result = parseConfig(text, 'test.yaml');
  if (!result.ok)
    assert.fail(`expected a valid config, got:\n${result.errors.map(formatConfigError).join('\n')}`);
  return result.config;
}

/** Parses `text` and returns its errors, failing the test if it is valid. */
export function errorsOf(text: string): ConfigError[] {
  const result = parseConfig(text, 'test.yaml');
  if (result.ok) assert.fail('expected config errors, got a valid config');
  return result.errors;
}

/** The one error of `text`, failing the test when there are zero or several. */
export function onlyErrorOf(text: string): ConfigError {
  const errors = errorsOf(text);
  assert.equal(errors.length, 1, `expected one error, got:\n${errors.map(formatConfigError).join('\n')}`);
  return errors[0]!;
}

/** `line:col path` of each error, the part of an error that tests pin exactly. */
export function placesOf(errors: readonly ConfigError[]): string[] {
  return errors.map((e) => `${e.line}:${e.col} ${e.path}`);
}

/** A valid config, one pool and one route; tests append to or vary it. Lines 1–7. */
export const BASE_LINES = [
  'pools:',
  '  - name: gpu',
  '    nodes:',
  '      - url: http://127.0.0.1:9100',
  'routes:',
  '  - name: all',
  '    pool: gpu',
] as const;
