/**
 * Plugin metrics: the `sluice_plugin_*` series plugins register through their context, and the
 * core's `sluice_plugin_errors_total{plugin,phase}`. Process-wide, so a series keeps counting across
 * reloads; rendered on the admin listener only. Nothing here runs per request unless a plugin
 * counts something.
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

  constructor(name: string, type: 'counter' | 'gauge', help: string, labelNames: readonly string[]) {
    this.name = name;
    this.type = type;
    this.help = help;
    this.labelNames = labelNames;
  }

  /** The series for these label values, created on first use. */
  at(labelValues: readonly string[]): Series {
    const key = labelValues.join('\u0001');
    let s = this.series.get(key);
    if (s === undefined) {
      if (labelValues.length !== this.labelNames.length) {
        throw new Error(
          `${this.name}: expected ${this.labelNames.length} label values (${this.labelNames.join(', ')}), got ${labelValues.length}`,
        );
      }
      s = new Series([...labelValues]);
      this.series.set(key, s);
    }
    return s;
  }

  inc(n = 1, ...labelValues: string[]): void {
    this.at(labelValues).value += n;
  }

  set(value: number, ...labelValues: string[]): void {
    this.at(labelValues).value = value;
  }

  /** Appends the family in the Prometheus text format. */
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${this.type}`);
    for (const s of this.series.values()) {
      const labels = this.labelNames.map((l, i) => `${l}="${escapeLabel(s.labels[i] ?? '')}"`).join(',');
      out.push(labels === '' ? `${this.name} ${s.value}` : `${this.name}{${labels}} ${s.value}`);
    }
  }
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
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
    if (!NAME.test(name)) throw new Error(`metric ${JSON.stringify(name)}: names must match ${NAME.source}`);
    for (const l of labelNames) {
      if (!LABEL.test(l)) throw new Error(`metric ${name}: bad label name ${JSON.stringify(l)}`);
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
}
