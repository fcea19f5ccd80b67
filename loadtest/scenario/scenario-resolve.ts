/**
 * Builds one `RunSpec` per variant from a schema-valid scenario: merges each variant's `load`,
 * `fleet` and `sluice` over the top level, applies defaults, reads config files and records where inline Sluice configs sit in the file. Problems are config issues with the
 * path of the key they come from; the Sluice configs themselves are checked by the caller.
 */

import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { isScalar, type Node } from 'yaml';
import type { ConfigIssue, ConfigPath } from '../../config/config-issue.js';
import type { YamlSource } from '../../config/yaml-locate.js';
import { resolveFleet, type Merged } from './fleet-resolve.js';
import { loopbackUrlProblem } from './loopback.js';
import type { ConfigOrigin, LoadSpec, RunSpec, SluiceSpec } from './scenario-types.js';
import { resolveWorkload } from './workload-resolve.js';

type Obj = Record<string, unknown>;

/** Defaults of the top-level keys and of `load`. */
export const SCENARIO_DEFAULTS = {
  seed: 1,
  durationS: 10,
  warmupS: 0,
  drainS: 10,
  maxRequests: 1_000_000,
  timeoutMs: 60_000,
  connections: 16,
  maxInFlight: 4096,
} as const;

/** What the resolver needs besides the data. */
export interface ResolveContext {
  /** Scenario file as given (errors name it). */
  file: string;
  /** Directory relative paths in the scenario are resolved against. */
  dir: string;
  source: YamlSource;
  text: string;
}

/** A Sluice config still to be checked, with the scenario key it came from. */
export interface PendingSluiceCheck {
  spec: SluiceSpec;
  nodes: number | null;
  keyPath: ConfigPath;
}

function isRecord(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function merge(data: Obj, variant: Obj | undefined, vi: number, section: string): Merged | null {
  const top = isRecord(data[section]) ? data[section] : undefined;
  const over = variant !== undefined && isRecord(variant[section]) ? variant[section] : undefined;
  if (top === undefined && over === undefined) return null;
  const value = { ...top, ...over };
  return {
    value,
    pathOf: (key) =>
      over !== undefined && (key in over || top === undefined)
        ? ['variants', vi, section, key]
        : [section, key],
  };
}

function resolveLoad(m: Merged, issues: ConfigIssue[], tenantsHaveRates: boolean): LoadSpec {
  const v = m.value;
  const mode = v['mode'] === 'closed' ? 'closed' : 'open';
  const rate = typeof v['rate'] === 'number' ? v['rate'] : null;
  if (mode === 'open' && rate === null && !tenantsHaveRates) {
    issues.push({
      path: m.pathOf('mode'),
      anchor: 'value',
      message: 'an open loop needs load.rate, or a rate on every tenant',
    });
  }
  return {
    mode,
    rate,
    arrivals: v['arrivals'] === 'poisson' ? 'poisson' : 'uniform',
    connections: typeof v['connections'] === 'number' ? v['connections'] : SCENARIO_DEFAULTS.connections,
    maxInFlight: typeof v['max_in_flight'] === 'number' ? v['max_in_flight'] : SCENARIO_DEFAULTS.maxInFlight,
  };
}

/** Where a config string's line 1, column 1 sits in the scenario file. */
function inlineOrigin(ctx: ResolveContext, path: ConfigPath): ConfigOrigin {
  const node = ctx.source.doc.getIn(path, true) as Node | undefined;
  const start = node?.range?.[0] ?? 0;
  const at = ctx.source.lineCounter.linePos(start);
  if (isScalar(node) && node.type === 'BLOCK_LITERAL') {
    // A literal block's text starts on the line after its `|` header, minus the block's indentation.
    const lines = ctx.text.split('\n').slice(at.line);
    const first = lines.find((l) => l.trim() !== '') ?? '';
    return { file: ctx.file, lineOffset: at.line, colOffset: first.length - first.trimStart().length };
  }
  return { file: ctx.file, lineOffset: at.line - 1, colOffset: at.col - 1 };
}

function resolveSluice(
  raw: unknown,
  path: ConfigPath,
  ctx: ResolveContext,
  issues: ConfigIssue[],
): SluiceSpec | null {
  if (!isRecord(raw)) return null;
  const listener = typeof raw['listener'] === 'string' ? raw['listener'] : null;
  const instances = typeof raw['instances'] === 'number' ? raw['instances'] : 1;
  const inline = raw['config'];
  const file = raw['config_file'];
  if ((typeof inline === 'string') === (typeof file === 'string')) {
    issues.push({
      path,
      anchor: 'value',
      message: 'give exactly one of config (inline YAML) and config_file',
    });
    return null;
  }
  if (typeof inline === 'string') {
    return { template: inline, origin: inlineOrigin(ctx, [...path, 'config']), listener, instances };
  }
  const full = resolve(ctx.dir, file as string);
  try {
    return {
      template: readFileSync(full, 'utf8'),
      origin: { file: full, lineOffset: 0, colOffset: 0 },
      listener,
      instances,
    };
  } catch (err) {
    issues.push({
      path: [...path, 'config_file'],
      anchor: 'value',
      message: `cannot read ${full}: ${(err as Error).message}`,
    });
    return null;
  }
}

/**
 * One `RunSpec` per variant of schema-valid `data` (one named `default` without variants), and the
 * Sluice configs that still need checking. Problems go to `issues`; runs built despite problems must
 * not be used.
 */
export function resolveRuns(
  data: Obj,
  ctx: ResolveContext,
  issues: ConfigIssue[],
): { runs: RunSpec[]; sluiceChecks: PendingSluiceCheck[] } {
  const variants = Array.isArray(data['variants']) ? (data['variants'] as Obj[]) : [undefined];
  const runs: RunSpec[] = [];
  const sluiceChecks: PendingSluiceCheck[] = [];
  const seen = new Set<string>();
  const target = typeof data['target'] === 'string' ? data['target'] : null;
  if (target !== null) {
    const problem = loopbackUrlProblem(target);
    if (problem !== undefined) issues.push({ path: ['target'], anchor: 'value', message: problem });
  }
  const nodeMetrics = Array.isArray(data['node_metrics']) ? (data['node_metrics'] as string[]) : [];
  nodeMetrics.forEach((u, i) => {
    const problem = loopbackUrlProblem(u);
    if (problem !== undefined) issues.push({ path: ['node_metrics', i], anchor: 'value', message: problem });
  });
  const workloadRaw = isRecord(data['workload']) ? data['workload'] : {};
  const tenantsHaveRates =
    Array.isArray(workloadRaw['tenants']) &&
    (workloadRaw['tenants'] as Obj[]).every((t) => typeof t['rate'] === 'number');
  variants.forEach((variant, vi) => {
    const name = typeof variant?.['name'] === 'string' ? variant['name'] : 'default';
    if (seen.has(name))
      issues.push({
        path: ['variants', vi, 'name'],
        anchor: 'value',
        message: `variant ${JSON.stringify(name)} is defined twice`,
      });
    seen.add(name);
    const loadM = merge(data, variant, vi, 'load') as Merged;
    const fleetM = merge(data, variant, vi, 'fleet');
    const fleet = fleetM === null ? null : resolveFleet(fleetM, ctx.dir, issues);
    const sluicePath: ConfigPath =
      variant !== undefined && 'sluice' in variant ? ['variants', vi, 'sluice'] : ['sluice'];
    const sluice = resolveSluice(
      variant !== undefined && 'sluice' in variant ? variant['sluice'] : data['sluice'],
      sluicePath,
      ctx,
      issues,
    );
    if (target !== null && (fleetM !== null || sluice !== null)) {
      issues.push({
        path: ['target'],
        anchor: 'key',
        message: 'give either target (a running server) or fleet / sluice (started for the run), not both',
      });
    } else if (target === null && fleetM === null && sluice === null) {
      issues.push({
        path: [],
        anchor: 'value',
        message:
          'nothing to send traffic to: add a fleet (simulated nodes), a sluice config, or a target URL',
      });
    }
    if (sluice !== null)
      sluiceChecks.push({
        spec: sluice,
        nodes: fleet?.nodes ?? null,
        keyPath: [...sluicePath, sluice.origin.file === ctx.file ? 'config' : 'config_file'],
      });
    const workload = resolveWorkload(
      workloadRaw,
      {
        chat: fleet?.profile.chat_model ?? 'default',
        embedding: fleet?.profile.embedding_model ?? 'default',
      },
      issues,
    );
    const get = (key: string, fallback: number): number => {
      const v = data[key];
      return typeof v === 'number' ? v : fallback;
    };
    runs.push({
      scenario: typeof data['name'] === 'string' ? data['name'] : 'scenario',
      file: ctx.file,
      description: typeof data['description'] === 'string' ? data['description'] : '',
      variant: name,
      variantDescription: typeof variant?.['description'] === 'string' ? variant['description'] : '',
      seed: get('seed', SCENARIO_DEFAULTS.seed),
      durationS: get('duration_s', SCENARIO_DEFAULTS.durationS),
      warmupS: get('warmup_s', SCENARIO_DEFAULTS.warmupS),
      drainS: get('drain_s', SCENARIO_DEFAULTS.drainS),
      maxRequests: get('max_requests', SCENARIO_DEFAULTS.maxRequests),
      timeoutMs: get('timeout_ms', SCENARIO_DEFAULTS.timeoutMs),
      load: resolveLoad(loadM, issues, tenantsHaveRates),
      fleet,
      sluice,
      target,
      nodeMetrics,
      workload,
    });
  });
  return { runs, sluiceChecks };
}
