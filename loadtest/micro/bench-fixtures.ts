/**
 * What the micro-benchmarks run on: real Sluice objects built the way the proxy builds them (a plan
 * compiled from YAML, upstream nodes that never connect, a session for a captured request), plus
 * the chat body and client headers of the proxy benchmark. Nothing here opens a socket.
 */
import { parseConfig } from '../../config/loader.js';
import type { PoolMember } from '../../proxy/balance/balance-policy.js';
import type { Downstream } from '../../proxy/lifecycle/downstream.js';
import { Session, type SessionHost } from '../../proxy/lifecycle/session.js';
import { StatsRegistry } from '../../proxy/metrics/stats.js';
import { compilePlan, type Plan } from '../../proxy/plan/plan.js';
import { RuntimeState } from '../../proxy/plan/runtime-state.js';
import { createLogger } from '../../proxy/runtime/logger.js';
import { NodeRegistry } from '../../proxy/upstream/node-registry.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

export { CHAT_BODY } from '../bench/chat-fixtures.js';

/**
 * `n` pool members on `http://10.0.0.1:8000`, `http://10.0.0.2:8000`, ... (never contacted), with
 * weights cycling through `weights`.
 */
export function benchMembers(n: number, weights: readonly number[] = [1]): PoolMember[] {
  return Array.from({ length: n }, (_, i) => ({
    node: new UpstreamNode(`http://10.0.0.${i + 1}:8000`, { connections: 1, connectTimeoutMs: 1000 }),
    weight: weights[i % weights.length]!,
  }));
}

/** Compiles `yaml` into a plan, as a reload would. Throws with the loader's errors when invalid. */
export function compileBenchPlan(yaml: string): Plan {
  const r = parseConfig(yaml, 'micro-benchmark.yaml');
  if (!r.ok) throw new Error(r.errors.map((e) => `${e.line}:${e.col} ${e.path}: ${e.message}`).join('; '));
  return compilePlan(1, r.config, r.digest, {
    registry: new NodeRegistry(),
    stats: new StatsRegistry(),
    runtime: new RuntimeState(),
    log: createLogger('error', () => undefined),
  });
}

/** A client connection that drops everything: sessions here are routed, never answered. */
class NullDownstream implements Downstream {
  readonly aborted = false;
  readonly started = false;
  reply(): void {}
  start(): void {}
  write(): boolean {
    return true;
  }
  end(): void {}
  closeWhenDone(): void {}
  destroy(): void {}
  abandonHead(): boolean {
    return false;
  }
}

const host: SessionHost = {
  stats: new StatsRegistry(),
  draining: false,
  sessionStarted(): void {},
  sessionDone(): void {},
  endpoints: null,
};
const downstream = new NullDownstream();

/** A session for a captured request, as the listener creates one. */
export function benchSession(
  plan: Plan,
  method: string,
  path: string,
  hostName: string,
  headers: string[],
  body: Buffer | null,
): Session {
  const s = new Session(host, plan, downstream, 'req-1', method, path, path, hostName, headers);
  s.body = body;
  return s;
}

/** Headers an OpenAI SDK sends with a chat completion (lower-case names, flat), without Host. */
export const SDK_HEADERS: readonly string[] = [
  'accept',
  'application/json',
  'content-type',
  'application/json',
  'user-agent',
  'OpenAI/JS 6.9.1',
  'x-stainless-lang',
  'js',
  'x-stainless-package-version',
  '6.9.1',
  'x-stainless-os',
  'Linux',
  'x-stainless-arch',
  'x64',
  'x-stainless-runtime',
  'node',
  'x-stainless-runtime-version',
  'v20.20.2',
  'authorization',
  'Bearer sk-bench-000000000000000000000000',
  'x-stainless-retry-count',
  '0',
  'accept-encoding',
  'gzip, deflate',
];
