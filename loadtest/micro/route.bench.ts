/**
 * Route matching over six routes (exact path, host + header, two model lists, a header, a
 * catch-all) for a chat completion that matches the fifth, the one naming its model; and a split
 * route's pool choice for a sticky session.
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

const SPLIT_YAML = `listeners:
  - { name: public, address: 127.0.0.1, port: 0 }
admin: { address: 127.0.0.1, port: 0 }
pools:
  - { name: v1, nodes: [{ url: http://127.0.0.1:9 }] }
  - { name: v2, nodes: [{ url: http://127.0.0.1:10 }] }
routes:
  - name: chat
    match: {}
    split: [{ pool: v1, weight: 80 }, { pool: v2, weight: 20 }]
    sticky_header: x-session-id
`;

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
  {
    name: 'route: split choice, sticky session already remembered (36-character id)',
    setup() {
      const plan = compileBenchPlan(SPLIT_YAML);
      const headers = [...SDK_HEADERS, 'x-session-id', '3f6c2a9e-8b1d-4e57-a0c4-9d2e7b6f1a38'];
      const s = benchSession(plan, 'POST', PATH, 'sluice.example', headers, Buffer.from(CHAT_BODY));
      const route = plan.routes.match(s);
      if (route?.name !== 'chat') throw new Error('the request does not reach chat');
      route.choosePool(s);
      return () => route.choosePool(s);
    },
  },
];
