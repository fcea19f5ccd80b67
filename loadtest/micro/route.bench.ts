/**
 * Route matching over six routes (exact path, host + header, two model lists, a header, a
 * catch-all) for a chat completion that matches the fifth, the one naming its model.
 */
import { Buffer } from 'node:buffer';
import { CHAT_BODY, SDK_HEADERS, benchSession, compileBenchPlan } from './bench-fixtures.js';
import type { MicroBenchmark } from './micro-benchmark.js';

const ROUTES_YAML = `listeners:
  - { name: public, address: 127.0.0.1, port: 0 }
admin: { address: 127.0.0.1, port: 0 }
pools:
  - name: gpu
    nodes: [{ url: http://127.0.0.1:9 }]
routes:
  - { name: embeddings, match: { path: /v1/embeddings, methods: [POST] }, pool: gpu }
  - { name: internal, match: { host: llm.internal, headers: { x-team: research } }, pool: gpu }
  - { name: big-model, match: { path_prefix: /v1/, models: [llama-3.1-70b-instruct] }, pool: gpu }
  - { name: eval, match: { path_prefix: /v1/, headers: { x-eval: "1" } }, pool: gpu }
  - name: small-model
    match: { path_prefix: /v1/chat/, models: [llama-3.1-8b-instruct, bench-model-8b-instruct] }
    pool: gpu
  - { name: default, match: { path_prefix: /v1/ }, pool: gpu }
`;

const PATH = '/v1/chat/completions';

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'route: match, 6 routes, hit on the 5th (model), body already parsed',
    allocationFree: true,
    setup() {
      const plan = compileBenchPlan(ROUTES_YAML);
      const s = benchSession(plan, 'POST', PATH, 'sluice.example', [...SDK_HEADERS], Buffer.from(CHAT_BODY));
      if (plan.routes.match(s)?.name !== 'small-model')
        throw new Error('the request does not reach small-model');
      return () => plan.routes.match(s);
    },
  },
  {
    name: 'route: new session + match, 6 routes, 1 KB JSON body parsed',
    setup() {
      const plan = compileBenchPlan(ROUTES_YAML);
      const body = Buffer.from(CHAT_BODY);
      return () =>
        plan.routes.match(benchSession(plan, 'POST', PATH, 'sluice.example', [...SDK_HEADERS], body));
    },
  },
];
