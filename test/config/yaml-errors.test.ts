/**
 * YAML-level problems (syntax, duplicate keys, several documents, unreadable files) come back in the
 * same shape as schema errors, with the position the YAML parser found.
 */
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadConfigFile } from '../../config/loader.js';
import { BASE_LINES, configOf, errorsOf, onlyErrorOf, placesOf, yamlLines } from './config-fixtures.js';

void describe('YAML errors', () => {
  void it('reports a duplicate key at the second occurrence, naming the first', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes:',
        '      - url: http://127.0.0.1:9100',
        '    name: other',
        'routes:',
        '  - name: all',
        '    pool: gpu',
      ),
    );
    assert.deepEqual(placesOf([error]), ['5:5 pools[0].name']);
    assert.equal(
      error.message,
      'duplicate key "name" (first given at line 2); each key may appear only once in a mapping',
    );
  });

  void it('reports a duplicate top-level key', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'pools: []'));
    assert.deepEqual(placesOf([error]), ['8:1 pools']);
    assert.match(error.message, /^duplicate key "pools" \(first given at line 1\)/);
  });

  void it('reports a syntax error with its position and stops there', () => {
    const error = onlyErrorOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: http://127.0.0.1:9100}',
        'routes: []',
        'bogus: 1',
      ),
    );
    assert.deepEqual(placesOf([error]), ['4:1 ']);
    assert.match(
      error.message,
      /^invalid YAML: Flow sequence in block collection must be sufficiently indented/,
    );
  });

  void it('reports a wrongly indented key', () => {
    const error = onlyErrorOf(yamlLines('pools:', '  - name: gpu', '   nodes: []'));
    assert.deepEqual(placesOf([error]), ['3:1 ']);
    assert.match(error.message, /^invalid YAML: /);
  });

  void it('explains tabs used for indentation', () => {
    const error = onlyErrorOf(yamlLines('pools:', '\t- name: gpu'));
    assert.deepEqual(placesOf([error]), ['2:1 ']);
    assert.equal(error.message, 'tabs are not allowed for indentation in YAML; indent with spaces');
  });

  void it('rejects a file with several YAML documents', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '---', 'pools: []'));
    assert.deepEqual(placesOf([error]), ['8:1 ']);
    assert.equal(
      error.message,
      "the file holds more than one YAML document ('---'); a Sluice config is a single document",
    );
  });

  void it('treats an unresolved tag as an error, not a warning', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'admin: {port: !port 9901}'));
    assert.deepEqual(placesOf([error]), ['8:15 ']);
    assert.equal(error.message, 'invalid YAML: Unresolved tag: !port');
  });

  void it('follows aliases, so a shared block is reported where it is written, once per use', () => {
    const errors = errorsOf(
      yamlLines(
        'pools:',
        '  - name: a',
        '    nodes: &nodes',
        '      - url: http://127.0.0.1:9100',
        '        weight: heavy',
        '  - name: b',
        '    nodes: *nodes',
        'routes: [{name: r, pool: a}]',
      ),
    );
    assert.deepEqual(placesOf(errors), ['5:17 pools[0].nodes[0].weight', '5:17 pools[1].nodes[0].weight']);
  });
});

void describe('YAML structure', () => {
  void it('gives each use of an anchored block its own copy, so defaults do not leak between uses', () => {
    const config = configOf(
      yamlLines(
        'pools:',
        '  - name: gpu',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        '    timeouts: &slow {ttfb_ms: 120000}',
        'routes:',
        '  - name: all',
        '    pool: gpu',
        '    timeouts: *slow',
      ),
    );
    assert.deepEqual(config.pools[0]!.timeouts, {
      connect_ms: 2000,
      ttfb_ms: 120000,
      idle_ms: 30000,
      total_ms: 600000,
    });
    assert.deepEqual(config.routes[0]!.timeouts, { ttfb_ms: 120000 });
  });

  void it('rejects an alias inside the node it refers to', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, 'admin: &loop {nested: [*loop]}'));
    assert.deepEqual(placesOf([error]), ['8:24 ']);
    assert.equal(
      error.message,
      'alias *loop is inside the node it refers to; a config cannot contain itself',
    );
  });

  void it('rejects an alias to an undefined or later anchor where the alias is written', () => {
    const errors = errorsOf(
      yamlLines(...BASE_LINES, '    timeouts: *slow', 'admin: {port: 9901}', 'a: *nope', 'x: &slow {}'),
    );
    assert.deepEqual(placesOf(errors), ['8:15 routes[0].timeouts', '10:4 a']);
    assert.equal(errors[0]!.message, 'unknown alias *slow: no anchor &slow is defined before it');
    assert.equal(errors[1]!.message, 'unknown alias *nope: no anchor &nope is defined before it');
  });

  void it('rejects a list used as a key', () => {
    const error = onlyErrorOf(yamlLines(...BASE_LINES, '[a, b]: 1'));
    assert.deepEqual(placesOf([error]), ['8:1 ']);
    assert.equal(error.message, 'a key must be a plain word, not a list or mapping');
  });

  void it('explains that merge keys are not supported', () => {
    const errors = errorsOf(
      yamlLines(
        'pools:',
        '  - &gpu',
        '    name: gpu',
        '    nodes: [{url: "http://127.0.0.1:9100"}]',
        '  - <<: *gpu',
        '    name: gpu2',
        'routes: [{name: all, pool: gpu}]',
      ),
    );
    assert.deepEqual(placesOf(errors), ['5:5 pools[1]', '5:5 pools[1]["<<"]']);
    assert.equal(errors[0]!.message, 'missing required key "nodes"');
    assert.equal(
      errors[1]!.message,
      'merge keys ("<<") are not supported (YAML 1.2); repeat the keys, or alias the whole block',
    );
  });
});

void describe('loadConfigFile', () => {
  void it('reports a missing file at 1:1 with the operating system reason', async () => {
    const file = join(tmpdir(), `sluice-missing-${process.pid}.yaml`);
    const result = await loadConfigFile(file);
    assert.equal(result.ok, false);
    if (result.ok) return;
    assert.equal(result.errors.length, 1);
    const error = result.errors[0]!;
    assert.deepEqual([error.file, error.line, error.col, error.path], [file, 1, 1, '']);
    assert.match(error.message, /^cannot read the config file: ENOENT: no such file or directory/);
  });

  void it('reports a directory given as the file', async () => {
    const result = await loadConfigFile(tmpdir());
    assert.equal(result.ok, false);
    if (!result.ok) assert.match(result.errors[0]!.message, /^cannot read the config file: EISDIR/);
  });
});
