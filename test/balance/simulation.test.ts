/**
 * Policies against a simulated fleet (not a unit test of a policy): on a pool whose second node
 * is four times slower, least-response-time keeps the tail short where round-robin lets the slow
 * node's queue grow. Runs the real load tester, simulated nodes and a Sluice child process.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseScenario } from '../../loadtest/scenario/scenario-loader.js';
import { runScenario } from '../../loadtest/run-scenario.js';

const variant = (name: string, kind: string): string => `  - name: ${name}
    sluice:
      config: |
        listeners: [{ name: public, address: 127.0.0.1, port: {{port}} }]
        admin: { address: 127.0.0.1, port: {{admin_port}} }
        pools:
          - name: gpu
            balance: { kind: ${kind} }
            nodes: {{nodes}}
        routes:
          - { name: chat, match: { path: /v1/chat/completions }, pool: gpu }
`;

// Two slots per node; about 100 ms per request on the fast node and 400 ms on the slow one:
// capacity 20/s + 5/s. Round-robin sends 8/s to each, so the slow node falls behind.
const SCENARIO = `name: simulation-mixed-speed
seed: 3
duration_s: 4
warmup_s: 0
drain_s: 20
timeout_ms: 30000
load: { mode: open, rate: 16 }
fleet:
  nodes: 2
  profile: fast
  speed_factors: [1, 0.25]
  profile_overrides: { max_running: 2, decode_base_ms: 5, default_max_tokens: 20 }
workload:
  mix:
    - { kind: chat, stream: false, turns: 1, user_tokens: 50, output_tokens: 20 }
variants:
${variant('round-robin', 'round-robin')}${variant('least-response-time', 'least-response-time')}`;

describe('policies on a simulated mixed-speed fleet', () => {
  it('least-response-time keeps p99 under half of round-robin at the same offered load', async () => {
    const scenario = await parseScenario(SCENARIO, 'simulation.yaml');
    const [rr, lrt] = await runScenario(scenario);
    assert.ok(rr !== undefined && lrt !== undefined);
    assert.equal(lrt.requests.errors, 0);
    assert.equal(rr.requests.errors, 0);
    const fast = lrt.latency_ms.e2e.p99_ms ?? Infinity;
    const slow = rr.latency_ms.e2e.p99_ms ?? 0;
    assert.ok(fast < 0.5 * slow, `p99 least-response-time ${fast} ms vs round-robin ${slow} ms`);
  });
});
