/**
 * The interface every balancing policy implements. A policy is built from an immutable member list
 * when a plan is compiled and only chooses among those members; health (node.available, slow
 * start), circuit breaking (node.maxInFlight) and retries are decided elsewhere and read here
 * through the node's fields.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { PromptBlocks } from './prompt-blocks.js';
import { stableHash26 } from './stable-hash.js';

/** A node as a member of one pool, with that pool's weight for it. */
export interface PoolMember {
  readonly node: UpstreamNode;
  /** Relative share of traffic; 0 means never picked. */
  readonly weight: number;
}

/** How a pick related to the request's affinity key (reported in `x-sluice-route`). */
export const AffinityOutcome = {
  /** The policy does not use affinity, or the request had no key. */
  none: 'none',
  /** The key's home node served it. */
  hit: 'hit',
  /** The home node was over its load bound or unavailable; a later node on the ring took it. */
  spill: 'spill',
} as const;
export type AffinityOutcome = (typeof AffinityOutcome)[keyof typeof AffinityOutcome];

/** What a policy may know about the request it places. The Session implements it. */
export interface PickRequest {
  /** Affinity key (already extracted per the route's config), or null when there is none. */
  readonly affinityKey: string | null;
  /**
   * `stableHash26(affinityKey)` (`stable-hash.ts`), the key's place on the hash ring, computed once
   * per key however many picks follow (the Session keeps it beside the key); only called when
   * `affinityKey` is not null. Absent: a policy that needs it hashes the key itself.
   */
  affinityHash?(): number;
  /** Estimated work in tokens (prompt estimate + max_tokens); at least 1. */
  readonly cost: number;
  /** Estimated prompt tokens (the prefill work), at least 1; read by policies that score prefill. */
  readonly promptTokens: number;
  /** Written by affinity-aware policies on each pick. */
  affinityOutcome: AffinityOutcome;
  /**
   * Written by policies that estimate it: the expected time to first token on the node picked, ms
   * (-1 when the policy does not estimate it or has no sample yet). Reported in `x-sluice-route`.
   */
  expectedTtftMs: number;
  /**
   * Written by cache-aware: prompt tokens it expects the picked node to hold in its prefix cache
   * (-1 when the policy does not estimate it). Reported in `x-sluice-route`.
   */
  cachedTokens: number;
  /**
   * Written by policies that estimate it: the expected wait before this request's prefill starts on
   * the node picked (the load term), ms; -1 otherwise. Reported in `x-sluice-route`.
   */
  queuedMs: number;
  /**
   * Written by cache-aware with a stall weight: what the request's prefill adds to the node's
   * running requests in its score (the stall term), ms; -1 otherwise. Reported in `x-sluice-route`.
   */
  stallMs: number;
  /**
   * The prompt's block hashes and the size of the conversation before its last message
   * (`prompt-blocks.ts`), computed once per request on the first call, however many picks follow;
   * read by cache-aware. Absent on requests that carry no prompt text (batch calls, mirrors).
   */
  promptBlocks?(): PromptBlocks;
}

/**
 * True when `node` may take a new attempt: healthy (not ejected, passing checks), not reporting
 * saturation, and below its circuit-breaker limit. Policies call this; a member with weight 0 is never eligible either.
 */
export function eligible(node: UpstreamNode): boolean {
  // HOT
  // Compared with the literals: a test of truth is a chain of type checks where the compiler does
  // not know the field holds a boolean; an identity test is one comparison.
  return node.available === true && node.saturated === false && node.inFlight < node.maxInFlight;
}

export interface BalancePolicy {
  /** The policy kind as written in YAML (`round-robin`, `least-request`, ...). */
  readonly kind: string;
  /**
   * True when `pick` weighs work in tokens (`req.cost`, `node.inFlightCost`). Only then does the
   * session estimate a request's tokens (which parses its JSON body) and count them on the node.
   */
  readonly weighsCost: boolean;
  /**
   * Chooses the node for the next attempt among eligible members not in `tried` (the nodes earlier
   * attempts of this request used). Returns null when no such member exists (the caller then
   * answers 503 or tries a fallback pool). Must not allocate on the common path.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null;
  /**
   * True when the policy reads the prefill queue (`node.timing`): the session then charges each
   * attempt's prompt tokens to its node until the first token and feeds the learned rates. Absent:
   * false (only the per-node latency histograms are recorded).
   */
  readonly scoresPrefill?: boolean;
}

/** Policy-specific options from the pool's `balance` config (all optional, defaults per policy). */
export interface BalanceOptions {
  /** consistent-hash: bounded-load factor; a node above (1 + epsilon) × mean load is skipped. */
  epsilon?: number;
  /** consistent-hash: in-flight work (tokens) under which a node keeps its keys whatever its share. */
  spillFloorTokens?: number;
  /** consistent-hash: ring points per unit of weight. */
  pointsPerWeight?: number;
  /** least-response-time, cache-aware: half-life of the learned prefill rates' samples, ms. */
  decayMs?: number;
  /** cache-aware, least-response-time: KV-cache capacity assumed per node (prefix cache and in-flight KV), tokens. */
  cacheTokens?: number;
  /**
   * least-response-time, cache-aware: how much a token of prefill queued ahead counts in the score
   * against a token of the request's own prefill (`expected-ttft.ts`); at least 1. Default
   * `DEFAULT_LRT_QUEUE_WEIGHT` (4) and `DEFAULT_CACHE_AWARE_QUEUE_WEIGHT` (1).
   */
  queueWeight?: number;
  /**
   * cache-aware: weight of the delay a request's prefill adds to the requests already running on a
   * node (their decode steps wait for it), at least 0; above 0 the policy also remembers where it
   * placed each affinity key. Default `DEFAULT_STALL_WEIGHT` (0).
   */
  stallWeight?: number;
  /** cache-aware: bound of the pool's prefix indexes together, bytes. */
  indexMaxBytes?: number;
  /** cache-aware: tokens credited to the affinity key's home node when its index has nothing better. */
  homeTokens?: number;
}

/** The ring hash of `req`'s affinity key `key`: `req.affinityHash()`, or the key hashed here without it. */
export function affinityHashOf(req: PickRequest, key: string): number {
  // HOT
  return req.affinityHash === undefined ? stableHash26(key) : req.affinityHash();
}

/** The `tried` list of a first attempt: no node used yet. Shared, never mutated. */
export const NO_NODES: readonly UpstreamNode[] = [];

/** Builds a policy over a fixed member list. */
export type BalancePolicyFactory = (members: readonly PoolMember[], options: BalanceOptions) => BalancePolicy;
