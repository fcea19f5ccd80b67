/**
 * Property tests of the config loader (`config/loader.ts`): the shipped configs, mutated the way a
 * hurried edit or a hostile file would (YAML punctuation, anchors and aliases, duplicated or
 * dropped lines, odd scalars), and arbitrary text never make it throw or hang; every rejection has
 * at least one error with a position inside the file and a message; the same text always gives
 * the same answer; an accepted file has pools and routes and the digest of its bytes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { parseConfig } from '../../config/loader.js';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { FUZZ_TIMEOUT_MS, fuzzParams } from './fuzz-runs.js';

const root = findSluiceRoot();
const CORPUS = [
  'default.yaml',
  'examples/minimal.yaml',
  'examples/full.yaml',
  'examples/fleet.yaml',
  'examples/plugins.yaml',
].map((f) => readFileSync(join(root, 'config', f), 'utf8'));

/** Fragments that mean something to YAML or to the schema. */
const FRAGMENTS = [
  ':',
  ': ',
  '- ',
  '  ',
  '\n',
  '\t',
  '{',
  '}',
  '[',
  ']',
  '"',
  "'",
  '#',
  ',',
  '&a ',
  '*a',
  '!!str ',
  '<<: *a',
  'null',
  '~',
  '0x10',
  '1e999',
  '-1',
  'true',
  '?',
  '|',
  '>',
  '%YAML 1.2\n',
  '---\n',
  '...\n',
  'port: 0',
  'name: x',
  '\u0000',
  '\uFEFF',
  'é',
];

type Mutation =
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'delete'; at: number; len: number }
  | { kind: 'dupLine' | 'dropLine' | 'indentLine'; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    text: fc.oneof(fc.constantFrom(...FRAGMENTS), fc.string({ maxLength: 8 })),
  }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 12 }) }),
  fc.record({
    kind: fc.constantFrom('dupLine' as const, 'dropLine' as const, 'indentLine' as const),
    at: fc.nat(),
  }),
);

function mutate(text: string, ms: readonly Mutation[]): string {
  let t = text;
  for (const m of ms) {
    if (m.kind === 'insert') {
      const at = m.at % (t.length + 1);
      t = t.slice(0, at) + m.text + t.slice(at);
    } else if (m.kind === 'delete') {
      const at = m.at % (t.length + 1);
      t = t.slice(0, at) + t.slice(at + m.len);
    } else {
      const lines = t.split('\n');
      const i = m.at % lines.length;
      if (m.kind === 'dupLine') lines.splice(i, 0, lines[i]!);
      else if (m.kind === 'dropLine') lines.splice(i, 1);
      else lines[i] = `  ${lines[i]!}`;
      t = lines.join('\n');
    }
  }
  return t;
}

/** Checks one loader answer for `text`; returns whether the file was accepted. */
function checkAnswer(text: string): boolean {
  const r = parseConfig(text, 'fuzz.yaml');
  assert.deepEqual(parseConfig(text, 'fuzz.yaml'), r, 'the same text gives the same answer');
  if (r.ok) {
    assert.ok(Array.isArray(r.config.pools) && r.config.pools.length > 0);
    assert.ok(Array.isArray(r.config.routes));
    assert.equal(r.digest, createHash('sha256').update(text).digest('hex'));
    return true;
  }
  assert.ok(r.errors.length > 0, 'a rejection says why');
  const lines = text.split(/\r\n|\r|\n/).length;
  for (const e of r.errors) {
    assert.equal(e.file, 'fuzz.yaml');
    assert.ok(Number.isInteger(e.line) && e.line >= 1 && e.line <= lines + 1, `line ${e.line} of ${lines}`);
    assert.ok(Number.isInteger(e.col) && e.col >= 1, `col ${e.col}`);
    assert.ok(typeof e.message === 'string' && e.message.length > 0);
  }
  return false;
}

describe('config loader (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  it('answers every mutated shipped config with a config or located errors, never a throw', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...CORPUS),
        fc.array(mutation, { minLength: 1, maxLength: 6 }),
        (base, ms) => {
          checkAnswer(mutate(base, ms));
        },
      ),
      fuzzParams(),
    );
  });

  it('answers arbitrary text and YAML-shaped noise the same way', () => {
    const noise = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc
        .array(fc.constantFrom(...FRAGMENTS, 'pools', 'routes', 'nodes', 'url: http://127.0.0.1:1'), {
          maxLength: 60,
        })
        .map((p) => p.join('')),
    );
    fc.assert(
      fc.property(noise, (text) => void checkAnswer(text)),
      fuzzParams(),
    );
  });

  it('accepts every shipped config as it is', () => {
    for (const text of CORPUS) assert.equal(checkAnswer(text), true);
  });

  it('rejects an alias bomb quickly instead of expanding it', () => {
    const lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]'];
    for (let i = 1; i < 12; i++)
      lines.push(
        `${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(96 + i)}`)
          .join(',')}]`,
      );
    const t0 = performance.now();
    const r = parseConfig(`${lines.join('\n')}\npools: []\nroutes: []\n`, 'bomb.yaml');
    assert.equal(r.ok, false);
    assert.ok(performance.now() - t0 < 2000, 'answered within 2 s');
  });
});
