/**
 * The pool `capacity` key: its defaults when the section is given partly, and `file:line:col`
 * errors for a target utilisation outside (0, 1] or a window that is too short.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatConfigError, parseConfig } from '../../config/loader.js';
import { basicConfig } from '../helpers/sluice.js';

function withCapacity(section: string): string {
  return basicConfig(['http://127.0.0.1:9']).replace(
    '  - name: gpu\n',
    `  - name: gpu\n    capacity: ${section}\n`,
  );
}

void describe('pool capacity config', () => {
  void it('fills the defaults of keys the section leaves out and leaves the section out when absent', () => {
    const r = parseConfig(withCapacity('{ window_ms: 5000 }'), 'c.yaml');
    assert.ok(r.ok);
    assert.deepEqual(r.config.pools[0]?.capacity, { window_ms: 5000, target_utilisation: 0.7 });
    const none = parseConfig(basicConfig(['http://127.0.0.1:9']), 'c.yaml');
    assert.ok(none.ok);
    assert.equal(none.config.pools[0]?.capacity, undefined);
  });

  const bad: [string, string, RegExp][] = [
    ['a target utilisation of 0', '{ target_utilisation: 0 }', /pools\[0\]\.capacity\.target_utilisation/],
    [
      'a target utilisation above 1',
      '{ target_utilisation: 1.5 }',
      /pools\[0\]\.capacity\.target_utilisation/,
    ],
    ['a window under a second', '{ window_ms: 500 }', /pools\[0\]\.capacity\.window_ms/],
    ['an unknown key', '{ target: 0.5 }', /unknown key "target"/],
  ];
  for (const [what, section, message] of bad) {
    void it(`rejects ${what} with its position`, () => {
      const r = parseConfig(withCapacity(section), 'c.yaml');
      assert.equal(r.ok, false);
      if (r.ok) return;
      const lines = r.errors.map(formatConfigError);
      assert.ok(
        lines.some((l) => /^c\.yaml:\d+:\d+ /.test(l) && message.test(l)),
        lines.join('\n'),
      );
    });
  }
});
