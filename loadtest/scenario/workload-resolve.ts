/**
 * Turns the `workload` section of a validated scenario into a `WorkloadSpec`: defaults applied,
 * tenants expanded, length distributions parsed, keys that belong to another request kind refused.
 * Reports problems as config issues (path + message); reads no files.
 */

import type { ConfigIssue, ConfigPath } from '../../config/config-issue.js';
import { LENGTH_PRESETS, parseLengthDist, type LengthDist } from './length-dist.js';
import type { MixEntry, TenantSpec, WorkloadSpec } from './scenario-types.js';

type Obj = Record<string, unknown>;

const CHAT_KEYS = [
  'stream',
  'system_prompt_tokens',
  'system_prompts',
  'turns',
  'user_tokens',
  'output_tokens',
  'hot_key',
  'repeat',
];
const EMBEDDING_KEYS = ['input_tokens', 'items'];

/** Defaults of the workload section. */
export const WORKLOAD_DEFAULTS = {
  /** Concurrent chat sessions per tenant. */
  sessions: 64,
  /** Hot-key session id when `hot_key.key` is not given. */
  hotKey: 'hot',
  /** Embedding input length, tokens. */
  embeddingInputTokens: 256,
} as const;

function num(o: Obj, key: string, fallback: number): number {
  const v = o[key];
  return typeof v === 'number' ? v : fallback;
}

function str(o: Obj, key: string): string | undefined {
  const v = o[key];
  return typeof v === 'string' ? v : undefined;
}

function dist(o: Obj, key: string, fallback: LengthDist, at: ConfigPath, issues: ConfigIssue[]): LengthDist {
  if (o[key] === undefined) return fallback;
  const parsed = parseLengthDist(o[key]);
  if (!Array.isArray(parsed)) return parsed;
  for (const p of parsed) issues.push({ path: [...at, key, ...p.path], anchor: 'value', message: p.message });
  return fallback;
}

function resolveTenants(raw: unknown, issues: ConfigIssue[]): TenantSpec[] {
  if (!Array.isArray(raw)) return [{ name: 'default', apiKey: null, rate: null, weight: 1 }];
  const out: TenantSpec[] = [];
  const seen = new Map<string, number>();
  raw.forEach((t: Obj, i) => {
    const name = str(t, 'name') ?? `tenant${i}`;
    const key = str(t, 'api_key') ?? null;
    const rate = typeof t['rate'] === 'number' ? t['rate'] : null;
    const weight = num(t, 'weight', rate ?? 1);
    const count = num(t, 'count', 1);
    for (let k = 0; k < count; k++) {
      const n = count === 1 ? name : `${name}-${k}`;
      if (seen.has(n)) {
        issues.push({
          path: ['workload', 'tenants', i, 'name'],
          anchor: 'value',
          message: `tenant ${JSON.stringify(n)} is defined twice (first in tenants[${seen.get(n)}])`,
        });
        return;
      }
      seen.set(n, i);
      out.push({ name: n, apiKey: key === null ? null : count === 1 ? key : `${key}-${k}`, rate, weight });
    }
  });
  return out;
}

function resolveMixEntry(m: Obj, at: ConfigPath, issues: ConfigIssue[]): MixEntry {
  const kind = m['kind'] === 'embedding' ? 'embedding' : 'chat';
  const foreign = kind === 'chat' ? EMBEDDING_KEYS : CHAT_KEYS;
  for (const key of Object.keys(m)) {
    if (foreign.includes(key)) {
      issues.push({
        path: [...at, key],
        anchor: 'key',
        message: `${key} does not apply to ${kind} requests`,
      });
    }
  }
  const weight = num(m, 'weight', 1);
  if (kind === 'embedding') {
    return {
      kind,
      weight,
      burst: num(m, 'burst', 1),
      inputTokens: dist(
        m,
        'input_tokens',
        { kind: 'fixed', value: WORKLOAD_DEFAULTS.embeddingInputTokens },
        at,
        issues,
      ),
      items: num(m, 'items', 1),
    };
  }
  const hot = (m['hot_key'] ?? {}) as Obj;
  const repeat = (m['repeat'] ?? {}) as Obj;
  return {
    kind,
    weight,
    burst: num(m, 'burst', 1),
    stream: m['stream'] !== false,
    systemPromptTokens: num(m, 'system_prompt_tokens', 0),
    systemPrompts: num(m, 'system_prompts', 1),
    turns: dist(m, 'turns', { kind: 'fixed', value: 1 }, at, issues),
    userTokens: dist(m, 'user_tokens', LENGTH_PRESETS['azure-conversation-input'] as LengthDist, at, issues),
    outputTokens: dist(
      m,
      'output_tokens',
      LENGTH_PRESETS['azure-conversation-output'] as LengthDist,
      at,
      issues,
    ),
    hotShare: num(hot, 'share', 0),
    hotKey: str(hot, 'key') ?? WORKLOAD_DEFAULTS.hotKey,
    repeatDistinct: num(repeat, 'distinct', 0),
    repeatZipf: num(repeat, 'zipf', 1),
  };
}

/**
 * The workload of a schema-valid scenario. `models` are the defaults for the chat and embedding model
 * names (from the fleet profile). Problems go to `issues`.
 */
export function resolveWorkload(
  raw: Obj,
  models: { chat: string; embedding: string },
  issues: ConfigIssue[],
): WorkloadSpec {
  const mixRaw = Array.isArray(raw['mix']) ? (raw['mix'] as Obj[]) : [];
  return {
    model: str(raw, 'model') ?? models.chat,
    embeddingModel: str(raw, 'embedding_model') ?? models.embedding,
    sessions: num(raw, 'sessions', WORKLOAD_DEFAULTS.sessions),
    sessionZipf: num(raw, 'session_zipf', 0),
    tenants: resolveTenants(raw['tenants'], issues),
    mix: mixRaw.map((m, i) => resolveMixEntry(m, ['workload', 'mix', i], issues)),
  };
}
