/**
 * Plugin metrics: the `sluice_plugin_*` series plugins register through their context, and the
 * core's `sluice_plugin_errors_total{plugin,phase}`. Process-wide, so a series keeps counting across
 * reloads; rendered on the admin listener only. Nothing here runs per request unless a plugin
 * counts something.
 *
 * Every call is checked where the plugin makes it, since a bad series would outlive the plugin (and
 * reloads) and break `/metrics` for good: a label value is a string, or a finite number or a boolean
 * (kept as `String(v)`); a value is a finite number, and a counter's increment is not negative. A
 * bad call throws a TypeError in the plugin's hook (which fails like any plugin error) and records
 * nothing.
 */
import type { PluginCounter, PluginGauge, PluginMetrics } from '../../plugins/api.js';

const NAME = /^sluice_plugin_[a-z0-9_]+$/;
const LABEL = /^[a-z_][a-z0-9_]*$/;

/** One series: its label values and its value. */
export class Series {
  readonly labels: readonly string[];
  value = 0;
  constructor(labels: readonly string[]) {
    this.labels = labels;
  }
}

/** One metric family (a name with its type, help and label names) and its series. */
export class Family implements PluginCounter, PluginGauge {
  readonly name: string;
  readonly type: 'counter' | 'gauge';
  readonly help: string;
  readonly labelNames: readonly string[];
  private readonly series = new Map<string, Series>();
  /** A gauge's values in the worker threads (`server.workers`), by worker index and series key. */
  private readonly remote = new Map<number, Map<string, { labels: readonly string[]; value: number }>>();

  constructor(name: string, type: 'counter' | 'gauge', help: string, labelNames: readonly string[]) {
    this.name = name;
    this.type = type;
    this.help = help;
    this.labelNames = labelNames;
  }

  /**
   * The series for these label values (in declared order), created on first use. Throws (and
   * creates nothing) when their number is wrong or one is not a string, finite number or boolean.
   */
  at(labelValues: readonly unknown[]): Series {
    const names = this.labelNames;
    if (labelValues.length !== names.length) {
      throw new TypeError(
        `${this.name}: expected ${names.length} label values (${names.join(', ')}), got ${labelValues.length}`,
      );
    }
    let values = labelValues as readonly string[];
    for (let i = 0; i < labelValues.length; i++) {
      if (typeof labelValues[i] !== 'string') {
        values = labelValues.map((v, j) => labelValue(this.name, names[j]!, v));
        break;
      }
    }
    // One label (the usual case): the value is the key. Several: JSON, which no value can forge
    // (a joined key would give ["a\u0001", "b"] and ["a", "\u0001b"] the same series).
    const key = values.length === 1 ? values[0]! : JSON.stringify(values);
    let s = this.series.get(key);
    if (s === undefined) {
      s = new Series(values === labelValues ? [...values] : values);
      this.series.set(key, s);
    }
    return s;
  }

  /** Adds `n` (default 1; a finite number, not negative for a counter). */
  inc(n: unknown = 1, ...labelValues: unknown[]): void {
    if (typeof n !== 'number' || !Number.isFinite(n) || (n < 0 && this.type === 'counter')) {
      throw new TypeError(
        `${this.name}: inc() takes a finite number${this.type === 'counter' ? ' of at least 0 (a counter only goes up)' : ''}, got ${describe(n)}`,
      );
    }
    this.at(labelValues).value += n;
  }

  /** Sets the series to `value` (a finite number). */
  set(value: unknown, ...labelValues: unknown[]): void {
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      throw new TypeError(`${this.name}: set() takes a finite number, got ${describe(value)}`);
    }
    this.at(labelValues).value = value;
  }

  /** Appends the family in the Prometheus text format. */
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`);
    // A gauge sums its value in every thread; a series only a worker has is shown too.
    const rows = new Map<string, { labels: readonly string[]; value: number }>();
    for (const [key, s] of this.series) rows.set(key, { labels: s.labels, value: s.value });
    for (const m of this.remote.values())
      for (const [key, r] of m) {
        const row = rows.get(key);
        if (row === undefined) rows.set(key, { labels: r.labels, value: r.value });
        else row.value += r.value;
      }
    for (const r of rows.values()) {
      const labels = this.labelNames.map((l, i) => `${l}="${escapeLabel(r.labels[i] ?? '')}"`).join(',');
      const v = sampleValue(r.value);
      out.push(labels === '' ? `${this.name} ${v}` : `${this.name}{${labels}} ${v}`);
    }
  }

  /** Every series with its label values and value (a worker thread's report). */
  entries(): IterableIterator<Series> {
    return this.series.values();
  }

  /** The main thread's side of a worker's gauge: its values now replace what it reported before. */
  setRemote(worker: number, rows: readonly [readonly string[], number][]): void {
    const m = new Map<string, { labels: readonly string[]; value: number }>();
    for (const [labels, value] of rows)
      m.set(labels.length === 1 ? labels[0]! : JSON.stringify(labels), { labels, value });
    this.remote.set(worker, m);
  }
}

/** A label value as kept: a string as is, a finite number or a boolean as `String(v)`; else throws. */
function labelValue(metric: string, label: string, v: unknown): string {
  if (typeof v === 'string') return v;
  if ((typeof v === 'number' && Number.isFinite(v)) || typeof v === 'boolean') return String(v);
  throw new TypeError(
    `${metric}: the value of label ${label} must be a string (or a finite number or a boolean), got ${describe(v)}`,
  );
}

/** What a rejected argument was, for the error message. */
function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'number') return String(v);
  if (typeof v === 'string')
    return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)}`;
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : String(typeof v);
}

/** A sample value in the exposition format (never reached by a plugin's value: those are finite). */
function sampleValue(v: number): string {
  if (Number.isFinite(v)) return String(v);
  return Number.isNaN(v) ? 'NaN' : v > 0 ? '+Inf' : '-Inf';
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** HELP text escapes backslashes and line feeds only. */
function escapeHelp(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** Every plugin series of the process. */
export class PluginMetricsRegistry {
  private readonly families = new Map<string, Family>();
  /** `sluice_plugin_errors_total{plugin,phase}`: hook failures (throw, reject, timeout). */
  readonly errors: Family;

  constructor() {
    this.errors = this.family(
      'sluice_plugin_errors_total',
      'counter',
      'Plugin hook failures (throw, rejection, timeout), by plugin instance and phase.',
      ['plugin', 'phase'],
    );
  }

  /** The family `name`, created on first use; the same name with another type or labels throws. */
  family(name: string, type: 'counter' | 'gauge', help: string, labelNames: readonly string[]): Family {
    if (typeof name !== 'string' || !NAME.test(name))
      throw new Error(`metric ${JSON.stringify(name)}: names must match ${NAME.source}`);
    if (typeof help !== 'string') throw new TypeError(`metric ${name}: help must be a string`);
    if (!Array.isArray(labelNames)) throw new TypeError(`metric ${name}: label names must be an array`);
    for (let i = 0; i < labelNames.length; i++) {
      const l: unknown = labelNames[i];
      if (typeof l !== 'string' || !LABEL.test(l) || l.startsWith('__'))
        throw new Error(`metric ${name}: bad label name ${JSON.stringify(l)}`);
      if (labelNames.indexOf(l) !== i) throw new Error(`metric ${name}: label ${l} named twice`);
    }
    const f = this.families.get(name);
    if (f === undefined) {
      const created = new Family(name, type, help, labelNames);
      this.families.set(name, created);
      return created;
    }
    if (f.type !== type || f.labelNames.join(',') !== labelNames.join(',')) {
      throw new Error(
        `metric ${name} is already registered as a ${f.type} with labels (${f.labelNames.join(', ')})`,
      );
    }
    return f;
  }

  /** The metrics view given to plugins through their context. */
  view(): PluginMetrics {
    return {
      counter: (name, help, labelNames = []) => this.family(name, 'counter', help, labelNames),
      gauge: (name, help, labelNames = []) => this.family(name, 'gauge', help, labelNames),
    };
  }

  /** Appends every family in the Prometheus text format. */
  render(out: string[]): void {
    for (const f of this.families.values()) f.render(out);
  }

  /** Every family (a worker thread's report). */
  all(): IterableIterator<Family> {
    return this.families.values();
  }
}
