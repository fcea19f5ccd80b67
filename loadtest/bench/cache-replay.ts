/**
 * Replays a scenario's request trace through response-cache's two in-process stores, offline and
 * exactly: the same requests in the same order for every policy and size, so LRU and the cost-aware
 * policy are compared on one trace with nothing else varying. Each answer's compute cost is the
 * simulated node's own model (prefill + decode steps of its max_tokens on an idle node, times the
 * profile's time scale) and its size the simulated answer's length. Prints hit rate and compute
 * saved per policy and cache size.
 *
 *   node dist/loadtest/bench/cache-replay.js [SCENARIO] [REQUESTS]
 *   (default loadtest/scenarios/response-cache.yaml, 200000 requests)
 */
import { createAnswerStore } from '../../plugins/response-cache/cache-policy.js';
import { loadScenarioFile } from '../scenario/scenario-loader.js';
import { CHARS_PER_TOKEN } from '../sim/outputs.js';
import { RequestSource } from '../workload/request-source.js';

/** Bytes of a chat answer around its text (ids, usage, field names). */
const ANSWER_OVERHEAD_BYTES = 300;
const SIZES = [256 * 1024, 512 * 1024, 1024 * 1024, 2048 * 1024];

async function main(): Promise<void> {
  const file = process.argv[2] ?? 'loadtest/scenarios/response-cache.yaml';
  const total = Number(process.argv[3] ?? 200_000);
  const scenario = await loadScenarioFile(file);
  const spec = scenario.runs[0]!;
  const profile = spec.fleet!.profile;
  const source = new RequestSource(spec.workload, spec.seed, profile.max_model_len);
  const trace: { key: string; costMs: number; bytes: number }[] = [];
  // Keys as long as the plugin's (a base64url SHA-256): the store counts key bytes too.
  const keys = new Map<string, string>();
  for (let i = 0; i < total; i++) {
    const body = source.next().body;
    let key = keys.get(body);
    if (key === undefined) keys.set(body, (key = String(keys.size).padStart(43, '0')));
    const b = JSON.parse(body) as { max_tokens: number; messages: { content: string }[] };
    const prompt = b.messages.reduce((n, m) => n + m.content.length, 0) / CHARS_PER_TOKEN;
    const costMs =
      (profile.prefill_fixed_ms +
        (prompt / profile.prefill_tokens_per_s) * 1000 +
        b.max_tokens * profile.decode_base_ms) *
      profile.time_scale;
    trace.push({ key, costMs, bytes: b.max_tokens * CHARS_PER_TOKEN + ANSWER_OVERHEAD_BYTES });
  }
  const distinct = new Set(trace.map((r) => r.key)).size;
  const allCost = trace.reduce((s, r) => s + r.costMs, 0);
  console.log(
    `${file}: ${total} requests, ${distinct} distinct, ${(allCost / 1000).toFixed(1)} s of node compute`,
  );
  console.log('policy      cache     hit rate   compute saved   evictions');
  for (const size of SIZES) {
    for (const policy of ['lru', 'cost-aware'] as const) {
      const store = createAnswerStore(policy, size);
      let hits = 0;
      let saved = 0;
      for (const r of trace) {
        const e = store.get(r.key, 0);
        if (e !== undefined) {
          hits++;
          saved += e.costMs;
          continue;
        }
        store.set(r.key, { body: 'x'.repeat(r.bytes), costMs: r.costMs, expiresAt: Infinity });
      }
      console.log(
        `${policy.padEnd(11)} ${`${size / 1024} KiB`.padEnd(9)} ${((100 * hits) / total).toFixed(1).padStart(6)} %   ${((100 * saved) / allCost).toFixed(1).padStart(6)} %        ${store.evictions}`,
      );
    }
  }
}

await main();
