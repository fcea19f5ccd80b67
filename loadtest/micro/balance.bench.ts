/**
 * Micro-benchmarks of balancing picks over 16 nodes with live-looking state: learned rates, queued
 * prefill, in-flight work. Each pick reads the nodes as a request would and changes nothing that
 * the next pick depends on beyond the policy's own rotation and running means.
 */
import type { BalancePolicy, PickRequest, PoolMember } from '../../proxy/balance/balance-policy.js';
import { CacheAwarePolicy } from '../../proxy/balance/cache-aware.js';
import { createLeastResponseTime } from '../../proxy/balance/least-response-time.js';
import { blockHashes } from '../../proxy/balance/prompt-blocks.js';
import { chargePrefill } from '../../proxy/balance/node-timing.js';
import { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import type { MicroBenchmark } from './micro-benchmark.js';

const NODES = 16;

/** 16 nodes (never contacted) with rates, queues and load that differ from node to node. */
export function benchFleet(): PoolMember[] {
  const members: PoolMember[] = [];
  for (let i = 0; i < NODES; i++) {
    const node = new UpstreamNode(`http://127.0.0.1:${20000 + i}`, {
      connections: 1,
      connectTimeoutMs: 1000,
    });
    const speed = [1, 1, 2, 4][i % 4]!;
    node.timing.ttftRate.add(100 / speed, 1000 + 37 * i, 1000 + i, 10_000);
    node.timing.headRate.add(900 / speed, 1000, 1000 + i, 10_000);
    chargePrefill(node, 500 * (i % 5), 0);
    node.inFlight = i % 7;
    node.inFlightCost = 1500 * (i % 7);
    node.scrapedWaiting = i % 3;
    members.push({ node, weight: 1 });
  }
  return members;
}

/** A pick request that a benchmark reuses, its prompt varied between calls. */
export function benchRequest(): PickRequest & { promptTokens: number; affinityKey: string | null } {
  return {
    affinityKey: null,
    cost: 1200,
    promptTokens: 1000,
    affinityOutcome: 'none',
    expectedTtftMs: -1,
    cachedTokens: -1,
    queuedMs: -1,
  };
}

function pickLoop(policy: BalancePolicy): () => unknown {
  const req = benchRequest();
  let i = 0;
  return () => {
    req.promptTokens = 200 + ((i++ * 977) & 4095);
    return policy.pick(req, []);
  };
}

/**
 * A cache-aware pick with a warm index: 64 conversations of 8 turns over 8 system prompts were
 * routed first (each turn ~4,000 to ~12,000 tokens, so 60–190 prompt blocks), then each call places
 * the next turn of one of them, prompt blocks already hashed (the session hashes once per request).
 */
function cacheAwareLoop(): () => unknown {
  const policy = new CacheAwarePolicy(benchFleet(), {});
  const turns: { blocks: Uint32Array; prompt: number; key: string }[] = [];
  for (let c = 0; c < 64; c++) {
    let text = `system prompt ${c % 8} `.repeat(400);
    for (let t = 0; t < 8; t++) {
      text += `turn ${t} of conversation ${c}: `.repeat(120);
      turns.push({ blocks: blockHashes(text), prompt: Math.ceil(text.length / 4), key: `conversation-${c}` });
    }
  }
  const req = benchRequest();
  let blocks = turns[0]!.blocks;
  const withBlocks = Object.assign(req, { promptBlocks: () => blocks });
  // Warm: every turn placed once, in conversation order.
  for (const t of turns) {
    blocks = t.blocks;
    withBlocks.promptTokens = t.prompt;
    withBlocks.affinityKey = t.key;
    policy.pick(withBlocks, []);
  }
  let i = 0;
  return () => {
    const t = turns[(i++ * 61) % turns.length]!;
    blocks = t.blocks;
    withBlocks.promptTokens = t.prompt;
    withBlocks.affinityKey = t.key;
    return policy.pick(withBlocks, []);
  };
}

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'balance: least-response-time pick, 16 nodes',
    setup: () => pickLoop(createLeastResponseTime(benchFleet(), {})),
    p99LimitNs: 1000,
    allocationFree: true,
  },
  {
    name: 'balance: cache-aware pick, 16 nodes, warm index',
    setup: cacheAwareLoop,
    p99LimitNs: 2000,
    allocationFree: true,
  },
];
