/** "Did you mean": close misspellings get a suggestion, unrelated words get none. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { suggestClosest } from '../../config/suggest.js';

const ROOT = ['version', 'listeners', 'admin', 'server', 'pools', 'routes', 'simulator'];

void describe('suggestClosest', () => {
  void it('suggests the key a typo is one or two edits away from', () => {
    assert.equal(suggestClosest('pool', ROOT), 'pools');
    assert.equal(suggestClosest('listners', ROOT), 'listeners');
    assert.equal(suggestClosest('Routes', ROOT), 'routes');
    assert.equal(suggestClosest('simualtor', ROOT), 'simulator');
  });

  void it('suggests the full key for a prefix of four letters or more', () => {
    assert.equal(
      suggestClosest('connections', ['name', 'nodes', 'connections_per_node']),
      'connections_per_node',
    );
    assert.equal(suggestClosest('ser', ROOT), undefined);
  });

  void it('suggests nothing for unrelated words', () => {
    assert.equal(suggestClosest('tenants', ROOT), undefined);
    assert.equal(suggestClosest('x', ROOT), undefined);
  });
});
