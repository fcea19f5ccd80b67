/**
 * The `fleet` section of a scenario variant: loads the simulator profile (shipped name or YAML path),
 * applies and checks `profile_overrides` key by key, and fills in speed factors. Reports problems
 * at the key they come from (the variant's or the top level's).
 */

import { extname, resolve } from 'node:path';
import type { ConfigIssue, ConfigPath } from '../../config/config-issue.js';
import { DEFAULT_PROFILE_NAME, loadSimProfile } from '../sim/profile-loader.js';
import { SimProfileError, validateSimProfile, type SimProfile } from '../sim/profile.js';
import type { FleetSpec } from './scenario-types.js';

type Obj = Record<string, unknown>;

function isRecord(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A section merged from the top level and a variant, remembering where each key came from. */
export interface Merged {
  value: Obj;
  /** The path of `key` in the file: in the variant when it sets the key, else at the top level. */
  pathOf(key: string): ConfigPath;
}

function loadProfile(
  ref: string,
  overrides: Obj,
  m: Merged,
  dir: string,
  issues: ConfigIssue[],
): SimProfile | null {
  const pathLike = ref.includes('/') || ['.yaml', '.yml'].includes(extname(ref));
  let base: SimProfile;
  try {
    base = loadSimProfile(pathLike ? resolve(dir, ref) : ref);
  } catch (err) {
    if (!(err instanceof SimProfileError)) throw err;
    issues.push({ path: m.pathOf('profile'), anchor: 'value', message: err.message });
    return null;
  }
  let ok = true;
  for (const [key, value] of Object.entries(overrides)) {
    try {
      validateSimProfile({ [key]: value }, 'profile_overrides');
    } catch (err) {
      if (!(err instanceof SimProfileError)) throw err;
      const message = err.message.replace(/^profile_overrides: /, '');
      issues.push({ path: [...m.pathOf('profile_overrides'), key], anchor: 'key', message });
      ok = false;
    }
  }
  return ok ? validateSimProfile({ ...base, ...overrides }, 'profile_overrides') : null;
}

/**
 * The fleet of one variant from its merged `fleet` section: node count, speed factors and the
 * profile (by name, or a path relative to `dir`) with its overrides. Null after reporting problems.
 */
export function resolveFleet(m: Merged, dir: string, issues: ConfigIssue[]): FleetSpec | null {
  const v = m.value;
  if (typeof v['nodes'] !== 'number') {
    issues.push({
      path: m.pathOf('nodes').slice(0, -1),
      anchor: 'value',
      message: 'missing required key "nodes"',
    });
    return null;
  }
  const nodes = v['nodes'];
  const speeds = Array.isArray(v['speed_factors']) ? (v['speed_factors'] as number[]) : [];
  if (speeds.length > nodes) {
    issues.push({
      path: m.pathOf('speed_factors'),
      anchor: 'value',
      message: `lists ${speeds.length} speed factors for ${nodes} nodes`,
    });
  }
  const ref = typeof v['profile'] === 'string' ? v['profile'] : DEFAULT_PROFILE_NAME;
  const overrides = isRecord(v['profile_overrides']) ? v['profile_overrides'] : {};
  const profile = loadProfile(ref, overrides, m, dir, issues);
  if (profile === null) return null;
  return {
    nodes,
    profile,
    speedFactors: Array.from({ length: nodes }, (_, i) => speeds[i] ?? 1),
    process: v['process'] === 'child' ? 'child' : 'in-process',
  };
}
