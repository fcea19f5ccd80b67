/**
 * Token-length distributions for prompts, outputs, turns and embedding inputs: fixed, uniform,
 * lognormal (heavy-tailed) and empirical percentile tables, plus named presets fitted to the public
 * Azure LLM inference traces (docs/gpu-inference-facts.md §6). Parsing reports problems by relative
 * path; sampling is seeded and never reads Math.random.
 */

import type { SeededRandom } from '../sim/prng.js';

/** A distribution of positive integer lengths (tokens, turns, items). */
export type LengthDist =
  | { kind: 'fixed'; value: number }
  | { kind: 'uniform'; min: number; max: number }
  /** exp(N(ln median, sigma²)), rounded, clipped to [min, max]. */
  | { kind: 'lognormal'; median: number; sigma: number; min: number; max: number }
  /** Piecewise-linear inverse CDF through (percentile 0..1, value) points, sorted, first at 0, last at 1. */
  | { kind: 'empirical'; points: readonly (readonly [number, number])[] };

/**
 * Named presets. The Azure fits are lognormals through the trace's p50 and p90 (σ = ln(p90/p50) /
 * 1.2816), clipped as docs/gpu-inference-facts.md suggests.
 */
export const LENGTH_PRESETS: Readonly<Record<string, LengthDist>> = Object.freeze({
  /** Azure 2023 conversation input: p50 1,020, p90 2,734 tokens. */
  'azure-conversation-input': { kind: 'lognormal', median: 1020, sigma: 0.77, min: 1, max: 8000 },
  /** Azure 2023 conversation output: p50 129, p90 424 tokens. */
  'azure-conversation-output': { kind: 'lognormal', median: 129, sigma: 0.93, min: 1, max: 1000 },
  /** Azure 2023 code input: p50 1,469, p90 5,186 tokens. */
  'azure-code-input': { kind: 'lognormal', median: 1469, sigma: 0.98, min: 1, max: 8000 },
  /** Azure 2023 code output: p50 13, p90 55 tokens. */
  'azure-code-output': { kind: 'lognormal', median: 13, sigma: 1.13, min: 1, max: 1000 },
});

/** A problem in a distribution, at a path relative to the distribution's own key. */
export interface DistProblem {
  path: (string | number)[];
  message: string;
}

const MAX_LENGTH = 1_000_000;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function positive(obj: Record<string, unknown>, key: string, problems: DistProblem[], int = true): number {
  const v = obj[key];
  const ok = typeof v === 'number' && v > 0 && v <= MAX_LENGTH && (!int || Number.isInteger(v));
  if (v === undefined) {
    problems.push({ path: [], message: `missing required key ${JSON.stringify(key)}` });
    return 1;
  }
  if (!ok) {
    problems.push({
      path: [key],
      message: `expected ${int ? 'an integer' : 'a number'} from ${int ? 1 : 'above 0'} to ${MAX_LENGTH}, got ${JSON.stringify(v ?? null)}`,
    });
    return 1;
  }
  return v;
}

const KEYS: Record<string, readonly string[]> = {
  fixed: ['dist', 'value'],
  uniform: ['dist', 'min', 'max'],
  lognormal: ['dist', 'median', 'sigma', 'min', 'max'],
  empirical: ['dist', 'percentiles'],
};

function parseEmpirical(table: unknown, problems: DistProblem[]): LengthDist {
  if (!isRecord(table)) {
    problems.push({ path: ['percentiles'], message: 'expected a mapping of percentile (0..100) to length' });
    return { kind: 'fixed', value: 1 };
  }
  const points: [number, number][] = [];
  for (const [key, value] of Object.entries(table)) {
    const p = Number(key);
    if (!(p >= 0 && p <= 100)) {
      problems.push({ path: ['percentiles', key], message: `percentile must be from 0 to 100, got ${key}` });
    } else if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_LENGTH) {
      problems.push({
        path: ['percentiles', key],
        message: `expected an integer from 1 to ${MAX_LENGTH}, got ${JSON.stringify(value)}`,
      });
    } else points.push([p / 100, value]);
  }
  points.sort((a, b) => a[0] - b[0]);
  if (problems.length === 0) {
    if (points[0]?.[0] !== 0 || points.at(-1)?.[0] !== 1) {
      problems.push({ path: ['percentiles'], message: 'must give the lengths at percentiles 0 and 100' });
    } else if (points.some((pt, i) => i > 0 && pt[1] < (points[i - 1]?.[1] ?? 0))) {
      problems.push({ path: ['percentiles'], message: 'lengths must not decrease as the percentile grows' });
    }
  }
  return { kind: 'empirical', points };
}

/**
 * Reads a distribution as written in a scenario: a number (fixed), a preset name, or a mapping with
 * `dist: fixed | uniform | lognormal | empirical` and that kind's keys. Returns the distribution, or
 * the problems found (paths relative to the value).
 */
export function parseLengthDist(value: unknown): LengthDist | DistProblem[] {
  if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= 1 && value <= MAX_LENGTH) return { kind: 'fixed', value };
    return [{ path: [], message: `expected an integer from 1 to ${MAX_LENGTH}, got ${value}` }];
  }
  if (typeof value === 'string') {
    const preset = LENGTH_PRESETS[value];
    if (preset !== undefined) return preset;
    return [
      {
        path: [],
        message: `unknown preset ${JSON.stringify(value)}; presets: ${Object.keys(LENGTH_PRESETS).join(', ')}`,
      },
    ];
  }
  if (!isRecord(value)) {
    return [{ path: [], message: 'expected a number, a preset name or a mapping with a "dist" key' }];
  }
  const kind = value['dist'];
  const allowed = typeof kind === 'string' ? KEYS[kind] : undefined;
  if (allowed === undefined) {
    return [
      {
        path: ['dist'],
        message: `must be one of: ${Object.keys(KEYS).join(', ')} (got ${JSON.stringify(kind ?? null)})`,
      },
    ];
  }
  const problems: DistProblem[] = [];
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      problems.push({
        path: [key],
        message: `unknown key ${JSON.stringify(key)}; allowed keys: ${allowed.join(', ')}`,
      });
    }
  }
  let dist: LengthDist;
  if (kind === 'fixed') dist = { kind, value: positive(value, 'value', problems) };
  else if (kind === 'uniform') {
    dist = { kind, min: positive(value, 'min', problems), max: positive(value, 'max', problems) };
    if (problems.length === 0 && dist.max < dist.min)
      problems.push({ path: ['max'], message: 'must be at least min' });
  } else if (kind === 'lognormal') {
    const median = positive(value, 'median', problems, false);
    const sigma = positive(value, 'sigma', problems, false);
    const min = value['min'] === undefined ? 1 : positive(value, 'min', problems);
    const max = value['max'] === undefined ? MAX_LENGTH : positive(value, 'max', problems);
    dist = { kind, median, sigma, min, max };
    if (problems.length === 0 && max < min) problems.push({ path: ['max'], message: 'must be at least min' });
  } else dist = parseEmpirical(value['percentiles'], problems);
  return problems.length > 0 ? problems : dist;
}

/** Draws one length (an integer >= 1) from `dist` with `rng`. */
export function sampleLength(dist: LengthDist, rng: SeededRandom): number {
  switch (dist.kind) {
    case 'fixed':
      return dist.value;
    case 'uniform':
      return dist.min + rng.nextInt(dist.max - dist.min + 1);
    case 'lognormal': {
      const v = Math.round(dist.median * Math.exp(dist.sigma * rng.nextGaussian()));
      return Math.min(dist.max, Math.max(dist.min, v));
    }
    case 'empirical': {
      const u = rng.nextFloat();
      const pts = dist.points;
      for (let i = 1; i < pts.length; i++) {
        const [p1, v1] = pts[i] as readonly [number, number];
        const [p0, v0] = pts[i - 1] as readonly [number, number];
        if (u <= p1) return Math.max(1, Math.round(p1 === p0 ? v1 : v0 + ((u - p0) / (p1 - p0)) * (v1 - v0)));
      }
      return Math.max(1, pts.at(-1)?.[1] ?? 1);
    }
  }
}
