/** The one-line, compiler-style rendering of a config error. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatConfigError, parseConfig } from '../../config/loader.js';
import { yamlLines } from './config-fixtures.js';

void describe('formatConfigError', () => {
  void it('renders file:line:col path: message', () => {
    const line = formatConfigError({
      file: 'my.yaml',
      line: 12,
      col: 7,
      path: 'pools[0].nodes[1].url',
      message: 'must be a base URL like http://10.0.0.7:8000 (got "ftp://x")',
    });
    assert.equal(
      line,
      'my.yaml:12:7 pools[0].nodes[1].url: must be a base URL like http://10.0.0.7:8000 (got "ftp://x")',
    );
  });

  void it('leaves the path out for errors at the root', () => {
    const line = formatConfigError({
      file: 'my.yaml',
      line: 1,
      col: 1,
      path: '',
      message: 'missing required key "pools"',
    });
    assert.equal(line, 'my.yaml:1:1 missing required key "pools"');
  });

  void it('renders what parseConfig reports, with the file name it was given', () => {
    const result = parseConfig(
      yamlLines('pools:', '  - name: gpu', '    nodes: [{url: "ftp://x"}]', 'routes: [{name: r, pool: gpu}]'),
      'conf/edge.yaml',
    );
    assert.equal(result.ok, false);
    if (result.ok) return;
    assert.deepEqual(result.errors.map(formatConfigError), [
      'conf/edge.yaml:3:19 pools[0].nodes[0].url: must be a base URL like http://10.0.0.7:8000 (got "ftp://x")',
    ]);
  });
});
