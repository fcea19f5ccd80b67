/**
 * Helpers for balancing tests: real UpstreamNode objects that never dispatch (so they open no
 * connection), pick requests, and a closed-loop driver that charges and releases in-flight work the
 * way the session does, so load-aware policies can be observed under steady load.
 */
import type {
  AffinityOutcome,
  BalancePolicy,
  PickRequest,
  PoolMember,
} from '../../proxy/balance/balance-policy.js';
import { chargePrefill, settlePrefill } from '../../proxy/balance/node-timing.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

/** Creates nodes and closes them all after the test. */
export class TestFleet {
  private readonly created: UpstreamNode[] = [];

  /** A node at `http://10.0.0.<host>:<port>`; nothing is contacted unless it is dispatched to. */
  node(host: number, port = 8000): UpstreamNode {
    const n = new UpstreamNode(`http://10.0.0.${host}:${port}`, { connections: 1, connectTimeoutMs: 1000 });
    this.created.push(n);
    return n;
  }

  /** One member per weight, on hosts 10.0.0.1, 10.0.0.2, ... */
  members(...weights: number[]): PoolMember[] {
    return weights.map((weight, i) => ({ node: this.node(i + 1), weight }));
  }

  /** Closes every node created so far (call from `afterEach`). */
  async close(): Promise<void> {
    await Promise.all(this.created.splice(0).map((n) => n.close()));
  }
}

/** A PickRequest whose key and cost a test may change between picks. */
export interface TestRequest extends PickRequest {
  affinityKey: string | null;
  cost: number;
  promptTokens: number;
  affinityOutcome: AffinityOutcome;
  expectedTtftMs: number;
  cachedTokens: number;
  queuedMs: number;
  stallMs: number;
}

/** A fresh pick request; its prompt is its whole cost unless `promptTokens` is given. */
export function request(affinityKey: string | null = null, cost = 1, promptTokens = cost): TestRequest {
  return {
    affinityKey,
    cost,
    promptTokens,
    affinityOutcome: 'none',
    expectedTtftMs: -1,
    cachedTokens: -1,
    queuedMs: -1,
    stallMs: -1,
  };
}

/**
 * Steady load: every pick is charged to its node (`inFlight + 1`, `inFlightCost + cost`, and, for a
 * policy that scores the prefill queue, its prompt tokens until it finishes, as the session does)
 * and the oldest attempt finishes once more than `depth` are in flight, so every attempt lasts the
 * same number of picks ("equal load").
 */
export class ClosedLoop {
  private readonly nodes: (UpstreamNode | null)[];
  private readonly costs: Float64Array;
  /** Prompt tokens charged to the node's prefill queue per slot (0: none). */
  private readonly prompts: Float64Array;
  /** Next slot of the circular buffer of attempts in flight. */
  private next = 0;

  constructor(depth: number) {
    this.nodes = new Array<UpstreamNode | null>(depth).fill(null);
    this.costs = new Float64Array(depth);
    this.prompts = new Float64Array(depth);
  }

  /** Picks for `req`, charges the chosen node and retires the oldest attempt. Returns the pick. */
  step(policy: BalancePolicy, req: PickRequest): UpstreamNode | null {
    const old = this.nodes[this.next] ?? null;
    if (old !== null) this.retire(old, this.next);
    const node = policy.pick(req, []);
    this.nodes[this.next] = node;
    this.costs[this.next] = req.cost;
    this.prompts[this.next] = 0;
    if (node !== null) {
      node.inFlight++;
      node.inFlightCost += req.cost;
      if (policy.scoresPrefill === true) {
        chargePrefill(node, req.promptTokens);
        this.prompts[this.next] = req.promptTokens;
      }
    }
    this.next = (this.next + 1) % this.nodes.length;
    return node;
  }

  /** Finishes every attempt still in flight. */
  drain(): void {
    for (let i = 0; i < this.nodes.length; i++) {
      const n = this.nodes[i];
      if (n !== null && n !== undefined) this.retire(n, i);
      this.nodes[i] = null;
    }
  }

  private retire(node: UpstreamNode, slot: number): void {
    node.inFlight--;
    node.inFlightCost -= this.costs[slot]!;
    if (this.prompts[slot]! > 0) settlePrefill(node, this.prompts[slot]!);
  }
}

/** Counts picks per member index over `n` steps of `loop` (keys `key0`, `key1`, ...). */
export function shares(
  policy: BalancePolicy,
  members: readonly PoolMember[],
  n: number,
  loop: ClosedLoop,
  cost = 1,
): number[] {
  const counts = members.map(() => 0);
  const req = request(null, cost);
  for (let i = 0; i < n; i++) {
    req.affinityKey = `key${i}`;
    const picked = loop.step(policy, req);
    const idx = members.findIndex((m) => m.node === picked);
    if (idx >= 0) counts[idx]!++;
  }
  loop.drain();
  return counts;
}
