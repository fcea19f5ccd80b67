/**
 * Scenario files are rejected before any traffic, with every problem as `file:line:col path:
 * message`: YAML errors, schema errors, non-loopback targets, bad distributions and problems in the
 * embedded Sluice config (pointed at the line inside the scenario). The shipped scenarios load.
 */

import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { findSluiceRoot } from '../../config/sluice-root.js';
import { LoadtestError, LoadtestErrorCode } from '../../loadtest/loadtest-error.js';
import { loadScenarioFile, parseScenario } from '../../loadtest/scenario/scenario-loader.js';

/** The problem lines of an invalid scenario. */
async function problems(text: string): Promise<string[]> {
  try {
    await parseScenario(text, 's.yaml');
  } catch (err) {
    assert.ok(err instanceof LoadtestError);
    assert.equal(err.code, LoadtestErrorCode.scenarioInvalid);
    return [...err.details];
  }
  assert.fail('the scenario was accepted');
}

const HEAD = 'name: t\nload: { mode: open, rate: 10 }\n';
const MIX = 'workload:\n  mix:\n    - kind: chat\n';

describe('scenario validation', () => {
  it('points at the key or value with line and column', async () => {
    const text = `${HEAD}fleet:\n  nodes: 2\n  profle: fast\n${MIX}      stream: maybe\n`;
    assert.deepEqual(await problems(text), [
      's.yaml:5:3 fleet.profle: unknown key "profle" (did you mean "profile"?); allowed keys: nodes, profile, profile_overrides, speed_factors, process',
      's.yaml:9:15 workload.mix[0].stream: expected true or false, got "maybe"',
    ]);
  });

  it('reports YAML syntax errors with their position', async () => {
    const lines = await problems('name: t\nload: { mode: open\n');
    assert.equal(lines.length, 1);
    assert.match(lines[0] ?? '', /^s\.yaml:\d+:\d+ invalid YAML/);
  });

  it('rejects a target outside 127.0.0.0/8, and node_metrics too', async () => {
    const text = `${HEAD}target: http://10.0.0.7:8000\nnode_metrics: [http://127.0.0.1:9100, http://localhost:9101]\n${MIX}`;
    assert.deepEqual(await problems(text), [
      's.yaml:3:9 target: 10.0.0.7 is not a loopback address: load tests may only send traffic to 127.0.0.0/8 (use e.g. 127.0.0.1)',
      's.yaml:4:39 node_metrics[1]: localhost is not a loopback address: load tests may only send traffic to 127.0.0.0/8 (use e.g. 127.0.0.1)',
    ]);
  });

  it('checks length distributions and per-kind keys', async () => {
    const text =
      `${HEAD}fleet: { nodes: 1, profile: fast }\n${MIX}` +
      '      items: 2\n      user_tokens: { dist: lognormal, median: 100, sigma: -1 }\n      output_tokens: azure-chat\n';
    assert.deepEqual(await problems(text), [
      's.yaml:7:7 workload.mix[0].items: items does not apply to chat requests',
      's.yaml:8:59 workload.mix[0].user_tokens.sigma: expected a number from above 0 to 1000000, got -1',
      's.yaml:9:22 workload.mix[0].output_tokens: unknown preset "azure-chat"; presets: azure-conversation-input, azure-conversation-output, azure-code-input, azure-code-output',
    ]);
  });

  it('needs a rate for an open loop and something to send to', async () => {
    assert.deepEqual(await problems(`name: t\nload: { mode: open }\n${MIX}`), [
      's.yaml:1:1 nothing to send traffic to: add a fleet (simulated nodes), a sluice config, or a target URL',
      's.yaml:2:15 load.mode: an open loop needs load.rate, or a rate on every tenant',
    ]);
  });

  it('points errors in an inline Sluice config at their line inside the scenario', async () => {
    const text =
      `${HEAD}fleet: { nodes: 2, profile: fast }\n${MIX}sluice:\n  config: |\n` +
      '    listeners: [{ name: public, address: 127.0.0.1, port: {{port}} }]\n' +
      '    pools:\n      - name: gpu\n        nodes: {{nodes}}\n        balanse: { kind: round-robin }\n' +
      '    routes: [{ name: all, match: {}, pool: gpu }]\n';
    const lines = await problems(text);
    assert.equal(lines.length, 1);
    assert.match(
      lines[0] ?? '',
      /^s\.yaml:13:9 sluice\.config pools\[0\]\.balanse: unknown key "balanse" \(did you mean "balance"\?\)/,
    );
  });

  it('refuses a Sluice config that would listen beyond loopback or dial a remote node', async () => {
    const text =
      `${HEAD}fleet: { nodes: 1, profile: fast }\n${MIX}sluice:\n  config: |\n` +
      '    listeners: [{ name: public, address: 0.0.0.0, port: {{port}} }]\n' +
      '    pools: [{ name: gpu, nodes: [{ url: "http://10.1.1.1:8000" }, { url: "{{node_url.0}}" }] }]\n' +
      '    routes: [{ name: all, match: {}, pool: gpu }]\n';
    assert.deepEqual(await problems(text), [
      's.yaml:9:42 sluice.config listeners[0].address: listener address 0.0.0.0 is not loopback; load tests bind 127.0.0.0/8 only',
      's.yaml:10:41 sluice.config pools[0].nodes[0].url: 10.1.1.1 is not a loopback address: load tests may only send traffic to 127.0.0.0/8 (use e.g. 127.0.0.1)',
    ]);
  });

  it('rejects unknown placeholders and node placeholders out of range', async () => {
    const text =
      `${HEAD}fleet: { nodes: 1, profile: fast }\n${MIX}sluice:\n  config: |\n` +
      '    listeners: [{ name: public, address: 127.0.0.1, port: {{ports}} }]\n' +
      '    pools: [{ name: gpu, nodes: [{ url: "{{node_url.3}}" }] }]\n';
    assert.deepEqual(await problems(text), [
      's.yaml:9:59 sluice.config: unknown placeholder {{ports}}; known: {{nodes}}, {{node_urls}}, {{node_url.N}}, {{port}}, {{admin_port}}',
      's.yaml:10:42 sluice.config: {{node_url.3}} needs a node index from 0 to 0, like {{node_url.0}}',
    ]);
  });

  it('names an unknown profile and a bad profile override', async () => {
    const text = `${HEAD}fleet:\n  nodes: 1\n  profile: h200\n${MIX}variants:\n  - name: a\n    fleet: { profile: fast, profile_overrides: { max_runing: 2 } }\n  - name: b\n`;
    const lines = await problems(text);
    assert.equal(lines.length, 2);
    assert.match(lines[0] ?? '', /^s\.yaml:5:12 fleet\.profile: unknown profile "h200" \(available: .*fast/);
    assert.match(
      lines[1] ?? '',
      /^s\.yaml:11:50 variants\[0\]\.fleet\.profile_overrides\.max_runing: unknown key "max_runing"/,
    );
  });

  it('loads every shipped scenario', async () => {
    const dir = join(findSluiceRoot(), 'loadtest', 'scenarios');
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'));
    assert.ok(files.length >= 6);
    for (const f of files) {
      const s = await loadScenarioFile(join(dir, f));
      assert.ok(s.runs.length >= 1, f);
    }
  });
});
