/**
 * The node's `/metrics` page in Prometheus text format, with vLLM's metric names for what a vLLM
 * server exports (so scrapers written for vLLM work unchanged) and `sluice_sim_*` for the rest.
 * It renders snapshots; it keeps no state.
 */

import type { EngineStats } from './engine.js';
import type { SimFaults } from './faults.js';
import type { NodeCounters } from './node-counters.js';
import type { SimProfile } from './profile.js';

function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function metric(out: string[], name: string, type: string, help: string, samples: [string, number][]): void {
  out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  for (const [labels, value] of samples)
    out.push(labels === '' ? `${name} ${value}` : `${name}{${labels}} ${value}`);
}

/** Renders the metrics page for one node. */
export function renderMetrics(
  profile: SimProfile,
  engine: EngineStats,
  counters: NodeCounters,
  faults: SimFaults,
  speedFactor: number,
): string {
  const m = `model_name="${labelValue(profile.chat_model)}"`;
  const out: string[] = [];
  let generationsServed = 0;
  for (const e of counters.entries())
    if (e.endpoint !== 'embedding' && e.outcome === '200') generationsServed += e.count;
  metric(out, 'vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', [
    [m, engine.running],
  ]);
  metric(out, 'vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', [
    [m, engine.waiting],
  ]);
  metric(out, 'vllm:gpu_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', [
    [m, engine.kvUsage],
  ]);
  metric(
    out,
    'vllm:prefix_cache_queries_total',
    'counter',
    'Prefix cache queries, in terms of number of queried tokens.',
    [[m, engine.cacheQueryTokens]],
  );
  metric(
    out,
    'vllm:prefix_cache_hits_total',
    'counter',
    'Prefix cache hits, in terms of number of cached tokens.',
    [[m, engine.cacheHitTokens]],
  );
  metric(out, 'vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', [
    [m, engine.promptTokens],
  ]);
  metric(out, 'vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.', [
    [m, engine.generationTokens],
  ]);
  metric(out, 'vllm:request_success_total', 'counter', 'Count of successfully processed requests.', [
    [`${m},finished_reason="length"`, generationsServed],
  ]);
  metric(
    out,
    'sluice_sim_requests_total',
    'counter',
    'Inference requests by endpoint and outcome (HTTP status, dropped, aborted).',
    counters.entries().map((e) => [`endpoint="${e.endpoint}",outcome="${e.outcome}"`, e.count]),
  );
  metric(
    out,
    'sluice_sim_injected_errors_total',
    'counter',
    'Error replies injected by faults or x-sim-status.',
    [['', counters.injectedErrors]],
  );
  metric(
    out,
    'sluice_sim_busy_slot_seconds_total',
    'counter',
    'Sum over requests of time spent holding a slot.',
    [['', engine.busySlotMs / 1000]],
  );
  metric(out, 'sluice_sim_prefix_cache_tokens', 'gauge', 'Tokens held by the prefix cache.', [
    ['', engine.cachedTokens],
  ]);
  metric(
    out,
    'sluice_sim_speed_factor',
    'gauge',
    'Per-node speed factor (modelled times are divided by it).',
    [['', speedFactor]],
  );
  metric(out, 'sluice_sim_slowdown', 'gauge', 'Current slowdown fault multiplier.', [['', faults.slowdown]]);
  return out.join('\n') + '\n';
}
