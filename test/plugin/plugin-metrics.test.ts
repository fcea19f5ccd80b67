/**
 * Plugin metrics, checked at the call: a label value is a string, or a finite number or boolean
 * kept as its string; a value is a finite number and a counter never goes down; a bad call throws a
 * TypeError and records nothing, so the rendered exposition stays valid whatever a plugin passed.
 * Registration refuses a help that is not a string and label names that are not an array of
 * distinct valid names.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PluginMetricsRegistry } from '../../proxy/plugin/plugin-metrics.js';

/** A sample line of the text exposition format (name, optional labels, a number). */
const SAMPLE =
  /^[a-z_:][a-z0-9_:]*(\{[a-z_][a-z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-z_][a-z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (-?\d+(\.\d+)?(e[+-]\d+)?|[+-]Inf|NaN)$/;

function rendered(r: PluginMetricsRegistry): string[] {
  const out: string[] = [];
  r.render(out);
  for (const line of out) if (!line.startsWith('# ')) assert.match(line, SAMPLE);
  return out;
}

/** Loose types: what a plain-JavaScript plugin can pass. */
type Loose = {
  inc(n?: unknown, ...labels: unknown[]): void;
  set(v: unknown, ...labels: unknown[]): void;
};

describe('plugin metrics', () => {
  it('takes finite numbers and booleans as label values, as their strings (the same series)', () => {
    const r = new PluginMetricsRegistry();
    const c = r
      .view()
      .counter('sluice_plugin_t_answers_total', 'Answers.', ['status', 'ok']) as unknown as Loose;
    c.inc(1, 200, true);
    c.inc(2, '200', 'true');
    c.inc(1, 1.5, false);
    const lines = rendered(r);
    assert.ok(lines.includes('sluice_plugin_t_answers_total{status="200",ok="true"} 3'), lines.join('\n'));
    assert.ok(lines.includes('sluice_plugin_t_answers_total{status="1.5",ok="false"} 1'));
  });

  it('throws a TypeError for any other label value, and records nothing', () => {
    const r = new PluginMetricsRegistry();
    const c = r.view().counter('sluice_plugin_t_bad_total', 'Bad.', ['status']) as unknown as Loose;
    const g = r.view().gauge('sluice_plugin_t_level', 'Level.', ['pool']) as unknown as Loose;
    for (const [i, v] of [undefined, null, {}, [], NaN, Infinity, 10n, Symbol('s'), () => 1].entries()) {
      assert.throws(() => c.inc(1, v), TypeError, `label value #${i}`);
      assert.throws(() => g.set(1, v), TypeError, `label value #${i}`);
    }
    assert.throws(
      () => c.inc(1, undefined),
      /sluice_plugin_t_bad_total: the value of label status must be a string/,
    );
    assert.throws(() => c.inc(1), /expected 1 label values \(status\), got 0/);
    assert.throws(() => c.inc(1, 'a', 'b'), /expected 1 label values/);
    const lines = rendered(r);
    assert.equal(lines.filter((l) => !l.startsWith('# ')).length, 0, lines.join('\n'));
  });

  it('throws a TypeError for a value that is not a finite number, or a counter going down', () => {
    const r = new PluginMetricsRegistry();
    const c = r.view().counter('sluice_plugin_t_total', 'Total.') as unknown as Loose;
    const g = r.view().gauge('sluice_plugin_t_gauge', 'Gauge.') as unknown as Loose;
    for (const [i, v] of [null, '1', NaN, Infinity, -Infinity, {}, 1n].entries()) {
      assert.throws(() => c.inc(v), TypeError, `inc() with value #${i}`);
      assert.throws(() => g.set(v), TypeError, `set() with value #${i}`);
    }
    assert.throws(
      () => g.set(undefined),
      /sluice_plugin_t_gauge: set\(\) takes a finite number, got undefined/,
    );
    assert.throws(() => c.inc(-1), /a counter only goes up/);
    assert.equal(rendered(r).filter((l) => !l.startsWith('# ')).length, 0);
    c.inc();
    c.inc(undefined);
    c.inc(0.5);
    g.set(-3);
    g.inc(-1); // a gauge may go down
    const lines = rendered(r);
    assert.ok(lines.includes('sluice_plugin_t_total 2.5'), lines.join('\n'));
    assert.ok(lines.includes('sluice_plugin_t_gauge -4'));
  });

  it('keeps series apart whatever their label values hold', () => {
    const r = new PluginMetricsRegistry();
    const c = r.view().counter('sluice_plugin_t_pairs_total', 'Pairs.', ['a', 'b']);
    c.inc(1, 'x\u0001', 'y');
    c.inc(1, 'x', '\u0001y');
    c.inc(1, 'q"\\\n', '');
    const lines = rendered(r).filter((l) => !l.startsWith('# '));
    assert.equal(lines.length, 3, lines.join('\n'));
    assert.ok(lines.includes('sluice_plugin_t_pairs_total{a="q\\"\\\\\\n",b=""} 1'));
  });

  it('refuses a help that is not a string and label names that are not distinct valid names', () => {
    const v = new PluginMetricsRegistry().view();
    assert.throws(
      () => v.counter('sluice_plugin_t_a_total', undefined as unknown as string),
      /help must be a string/,
    );
    assert.throws(
      () => v.counter('sluice_plugin_t_b_total', 'B.', 'status' as unknown as string[]),
      /label names must be an array/,
    );
    assert.throws(() => v.counter('sluice_plugin_t_c_total', 'C.', ['x', 'x']), /label x named twice/);
    assert.throws(() => v.counter('sluice_plugin_t_d_total', 'D.', ['__x']), /bad label name/);
    assert.throws(
      () => v.counter('sluice_plugin_t_e_total', 'E.', [5 as unknown as string]),
      /bad label name/,
    );
  });

  it('escapes a help text over several lines', () => {
    const r = new PluginMetricsRegistry();
    r.view().gauge('sluice_plugin_t_help', 'Two\nlines, one \\ backslash.').set(1);
    assert.ok(rendered(r).includes('# HELP sluice_plugin_t_help Two\\nlines, one \\\\ backslash.'));
  });
});
