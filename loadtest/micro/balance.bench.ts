/**
 * Balancing picks over 16 nodes, one benchmark per policy: the node's load moves with each pick (as
 * the session charges it), keyed policies see 1024 distinct keys. Every policy promises an
 * allocation-free pick (balance-policy.ts), held here to a p99 bound as well.
 */
import {
  NO_NODES,
  type AffinityOutcome,
  type BalancePolicy,
  type PoolMember,
} from '../../proxy/balance/balance-policy.js';
import { createConsistentHash } from '../../proxy/balance/consistent-hash.js';
import { createLeastRequest } from '../../proxy/balance/least-request.js';
import { createLeastResponseTime } from '../../proxy/balance/least-response-time.js';
import { createRoundRobin } from '../../proxy/balance/round-robin.js';
import { benchMembers } from './bench-fixtures.js';
import type { MicroBenchmark } from './micro-benchmark.js';

const NODES = 16;
/** A pick over 16 nodes is a few hundred ns; the bound catches a pick that turned O(n²) or blocking. */
const PICK_P99_LIMIT_NS = 5000;

/** A pick request whose key the benchmark changes between calls. */
interface BenchRequest {
  affinityKey: string | null;
  cost: number;
  affinityOutcome: AffinityOutcome;
}

function pick(kind: string, factory: (m: PoolMember[]) => BalancePolicy, keyed: boolean): MicroBenchmark {
  return {
    name: `balance: ${kind} pick, ${NODES} nodes${keyed ? ', 1024 keys' : ''}`,
    allocationFree: true,
    p99LimitNs: PICK_P99_LIMIT_NS,
    setup() {
      const members = benchMembers(NODES, [1, 1, 2, 1, 3]);
      members.forEach((m, i) => {
        m.node.ttfbEwmaMs = 40 + i * 7;
        m.node.inFlightCost = (i * 997) % 5000;
      });
      const policy = factory(members);
      const keys = Array.from({ length: 1024 }, (_, i) => `session-${i}`);
      const req: BenchRequest = { affinityKey: null, cost: 1200, affinityOutcome: 'none' };
      let i = 0;
      return () => {
        if (keyed) req.affinityKey = keys[i++ & 1023]!;
        const node = policy.pick(req, NO_NODES);
        if (node !== null) node.inFlightCost = (node.inFlightCost + 37) % 5000;
        return node;
      };
    },
  };
}

export const benchmarks: MicroBenchmark[] = [
  pick('round-robin', (m) => createRoundRobin(m, {}), false),
  pick('least-request', (m) => createLeastRequest(m, { seed: 7 }), false),
  pick('least-response-time', (m) => createLeastResponseTime(m, {}), false),
  pick('consistent-hash', (m) => createConsistentHash(m, { seed: 7 }), true),
];
