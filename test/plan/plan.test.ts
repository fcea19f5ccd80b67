/**
 * Compiling a config into a plan: the pool's `balance` settings reach the policy it builds. No
 * listener is bound and nothing is dispatched; the nodes are placeholders on a closed port.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseConfig } from '../../config/loader.js';
import type { PickRequest } from '../../proxy/balance/balance-policy.js';
import { chargePrefill } from '../../proxy/balance/node-timing.js';
import { CacheAwarePolicy } from '../../proxy/balance/cache-aware.js';
import { StatsRegistry } from '../../proxy/metrics/stats.js';
import { compilePlan, type Plan } from '../../proxy/plan/plan.js';
import { RuntimeState } from '../../proxy/plan/runtime-state.js';
import { createLogger } from '../../proxy/runtime/logger.js';
import { NodeRegistry } from '../../proxy/upstream/node-registry.js';
import { basicConfig } from '../helpers/sluice.js';

const NODES = ['http://127.0.0.1:9', 'http://127.0.0.1:10'];

describe('plan compilation', () => {
  const registry = new NodeRegistry();
  const runtime = new RuntimeState();
  afterEach(async () => {
    await runtime.close();
    await registry.destroyAll();
  });

  /** Compiles `basicConfig` with `balance` as the pool's balance section. */
  function compile(balance: string): Plan {
    const r = parseConfig(basicConfig(NODES, '', { pool: `    balance: ${balance}` }), 'plan.yaml');
    if (!r.ok) throw new Error(JSON.stringify(r.errors));
    return compilePlan(1, r.config, r.digest, {
      registry,
      stats: new StatsRegistry(),
      runtime,
      log: createLogger('error', () => undefined),
    });
  }

  /**
   * Where a keyed request goes once its home node carries 1000 tokens and the other node nothing:
   * over the bounded-load cap (1.25 × 1100 / 2), but under the default spill floor.
   */
  function outcomeUnderLoad(plan: Plan): string {
    const pool = plan.pools.get('gpu')!;
    const req: PickRequest = {
      affinityKey: 'session-1',
      cost: 100,
      promptTokens: 100,
      affinityOutcome: 'none',
      expectedTtftMs: -1,
      cachedTokens: -1,
      queuedMs: -1,
      stallMs: -1,
    };
    const home = pool.pick(req, [])!;
    assert.equal(req.affinityOutcome, 'hit');
    home.inFlightCost = 1000;
    const picked = pool.pick(req, [])!;
    home.inFlightCost = 0;
    assert.equal(picked === home, req.affinityOutcome === 'hit');
    return req.affinityOutcome;
  }

  it('passes balance.spill_floor_tokens to consistent-hash', () => {
    const base = '{ kind: consistent-hash, affinity: { source: header, name: x-session-id }';
    assert.equal(outcomeUnderLoad(compile(`${base} }`)), 'hit', 'the default floor keeps the key home');
    assert.equal(outcomeUnderLoad(compile(`${base}, spill_floor_tokens: 0 }`)), 'spill');
  });

  it('passes balance.stall_weight to cache-aware', () => {
    const req = (): PickRequest => ({
      affinityKey: 'conversation',
      cost: 400,
      promptTokens: 300,
      affinityOutcome: 'none',
      expectedTtftMs: -1,
      cachedTokens: -1,
      queuedMs: -1,
      stallMs: -1,
    });
    const pickOf = (plan: Plan) => {
      const pool = plan.pools.get('gpu')!;
      // As after the turns that show this instance places its conversations' turns itself.
      if (pool.policy instanceof CacheAwarePolicy) pool.policy.staleShare = 0;
      return pool.pick(req(), []);
    };
    const balance = '{ kind: cache-aware, affinity: { source: header, name: x-session-id }';
    const off = compile(`${balance}, stall_weight: 0 }`);
    const home = pickOf(off)!;
    // The home holds the key's prefix (credited 299 of 300 tokens): its own prefill is 1 + 128
    // token-times, the other node's 300 + 128. Its prefill's stall adds weight × in flight × 129.
    home.inFlight = 3;
    try {
      assert.equal(pickOf(compile(`${balance} }`)), home, 'the default 0.5: 129 × 2.5 against 428');
      assert.notEqual(pickOf(compile(`${balance}, stall_weight: 1 }`)), home, '129 × 4 against 428');
      home.inFlight = 20;
      assert.equal(pickOf(off), home, 'weight 0 weighs no stall');
      assert.notEqual(pickOf(compile(`${balance} }`)), home, 'the default: 129 × 11 against 428');
    } finally {
      home.inFlight = 0;
    }
  });

  it('passes balance.queue_weight to least-response-time', () => {
    const plan = compile('{ kind: least-response-time }');
    const pool = plan.pools.get('gpu')!;
    const [fast, slow] = pool.members.map((m) => m.node);
    // 0.1 and 0.4 ms per token; 1,000 tokens queued on the fast node.
    fast!.timing.ttftRate.add(100, 1000, 1000, 10_000);
    slow!.timing.ttftRate.add(400, 1000, 1000, 10_000);
    chargePrefill(fast!, 1000);
    const req: PickRequest = {
      affinityKey: null,
      cost: 1100,
      promptTokens: 1000,
      affinityOutcome: 'none',
      expectedTtftMs: -1,
      cachedTokens: -1,
      queuedMs: -1,
      stallMs: -1,
    };
    // Default 4: 0.1 × (4 × 1000 + 1128) = 512.8 > 0.4 × 1128 = 451.2.
    assert.equal(pool.pick(req, []), slow);
    // Weight 1: 0.1 × (1000 + 1128) = 212.8.
    assert.equal(
      compile('{ kind: least-response-time, queue_weight: 1 }').pools.get('gpu')!.pick(req, []),
      fast,
    );
  });
});
