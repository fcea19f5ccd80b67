/**
 * Cache-aware balancing: per request, the node with the lowest expected time to first token once
 * the prefix it has likely cached is taken off the request's own prefill. The load term is
 * least-response-time's (`expected-ttft.ts`: the prefill queue at each node's learned rate); the
 * cache term comes from a per-node prefix index this instance learns from what it routed
 * (`prefix-index.ts`), plus a deterministic home node per affinity key so that instances without
 * shared state agree where a conversation starts. One score, in milliseconds:
 *
 *   expected(node) = base(node) + rate(node) × (queued(node) + max(1, prompt − cached(node)) + FIXED)
 *   score(node)    = (expected(node) + (queueWeight − 1) × rate(node) × queued(node)
 *                     + stallWeight × inFlight(node) × rate(node) × (prompt − cached(node) + FIXED))
 *                    / (weight × weightFactor)
 *   cached(node)  ≤ room(node) = cache_tokens − inFlightCost(node) − cost        (KV left)
 *
 * A prefix the index holds counts only while the blocks recorded on the node since its last use fit
 * in `room` (an LRU cache evicts it otherwise); a node without room for the request has the missing
 * tokens queued (`expected-ttft.ts`). A node whose queued prefill is far above the pool's mean gets
 * no cache credit (least-load).
 *
 * The policy remembers where it last placed each affinity key, and the turn it placed (chat
 * messages, prompt blocks; up to `PLACED_KEYS` keys, by the key's hash: two keys that share a slot
 * replace each other). A request that extends that turn's prompt by more messages than one turn
 * adds (`FOLLOW_MESSAGES`) is stale: another instance sent the turns since, so this index is no
 * guide. The home's prior then stands even where the index shows the prefix evicted, and what the
 * index holds of the conversation off the home counts for no more than the key's prefix, so that
 * instances sharing nothing meet at the home again after a spill or an eviction. Otherwise (the
 * previous turn, a body without chat messages, another conversation under the same key) the index
 * speaks for the conversation: the prior gives way to what it shows evicted, and to an index that
 * has forgotten more than the home's KV room holds. A key this instance never placed keeps the
 * prior (docs/balancing.md, "Two instances without shared state").
 *
 * The stall term (weight 0.5 by default) is what the request's prefill costs the requests already
 * on the node: with chunked prefill each of their decode steps waits for it. With it, load places
 * new conversations too, so the node this instance placed the key on last takes the home's part; an
 * instance that did not place it still credits the home, so several instances without shared state
 * would each follow their own placements. The term therefore counts in full only while stale
 * requests are rare among those whose key this instance placed before (under 5 %: one instance, or
 * a balancer that keeps each conversation on one instance), and fades to nothing at 20 % (instances
 * that take turns on conversations) (docs/balancing.md, "Stall weight").
 */
import { AffinityOutcome, affinityHashOf } from './balance-policy.js';
import type { BalanceOptions, BalancePolicy, PickRequest, PoolMember } from './balance-policy.js';
import { DEFAULT_POINTS_PER_WEIGHT, HashRing } from './hash-ring.js';
import { ExpectedTtft } from './expected-ttft.js';
import { MemberTable } from './member-table.js';
import { PrefixIndex } from './prefix-index.js';
import { DEFAULT_KV_TOKENS, FIXED_WORK_TOKENS } from './node-timing.js';
import { PROMPT_BLOCK_TOKENS } from './prompt-blocks.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';

/** Default prefix-cache capacity assumed per node, tokens (vLLM's KV pool for an 8B model on one 80 GB GPU). */
export const DEFAULT_CACHE_TOKENS = DEFAULT_KV_TOKENS;
/** Default bound of the pool's prefix indexes together, bytes. */
export const DEFAULT_INDEX_MAX_BYTES = 64 * 1024 * 1024;
/** Default: cache credit is withdrawn from a node whose queue exceeds (1 + this) × the pool mean ... */
export const DEFAULT_CACHE_EPSILON = 1;
/** ... and this many tokens. */
export const DEFAULT_CACHE_SPILL_FLOOR_TOKENS = 16_384;
/**
 * Default weight of queued prefill against the request's own: 1, the expected wait as it is. A
 * heavier queue (least-response-time's 4) spills conversations from the node that holds them
 * sooner: on prefix-affinity.yaml the hit rate fell from 3.1× round-robin's to 2.7× for the
 * same TTFT p99 (docs/benchmarks.md).
 */
export const DEFAULT_CACHE_AWARE_QUEUE_WEIGHT = 1;
/**
 * Default weight of the stall a prefill adds to a node's running requests. It counts in full only
 * while this instance places the turns of its conversations itself (`STALL_FULL_SHARE`).
 */
export const DEFAULT_STALL_WEIGHT = 0.5;
/**
 * Share of stale requests (turns after ones another instance placed: `stale` in `pick`) among chat
 * requests whose key this instance placed before, up to which the stall weight counts in full for
 * keyed requests, and from which it counts no more (linear between). One instance sees none but
 * turns that add four messages or more at once; instances behind a balancer that spreads each
 * conversation's turns over them see about half or more. The stall term places conversations by load, which instances that share no
 * state cannot agree on: each would follow its own placements (docs/balancing.md, "Stall weight").
 */
const STALL_FULL_SHARE = 0.05;
const STALL_OFF_SHARE = 0.2;
/**
 * Weight of one request in the stale share's moving average (about the last 32 that count: from
 * its start at 1, the share falls under 5 % after about 95 requests that follow this instance's own
 * turns).
 */
const STALE_SHARE_ALPHA = 1 / 32;
/** Keys whose last placement a policy remembers (a power of two). */
export const PLACED_KEYS = 4096;
const PLACED_KEYS_MASK = PLACED_KEYS - 1;
/** A placed-key entry: key hash + 1, member slot, then two turns (`T_*` fields each). */
const P_KEY = 0;
const P_SLOT = 1;
const P_TURN = 2;
const P_PREVIOUS = 5;
const PLACED_FIELDS = 8;
/** A turn: chat messages, prompt blocks, hash of the last block. */
const T_MESSAGES = 0;
const T_BLOCKS = 1;
const T_HASH = 2;
const TURN_FIELDS = 3;
/**
 * Messages a request may have beyond the one this instance last placed its key with for this
 * instance to have placed its previous turn: an answer and a question (2), or an assistant's tool
 * call and up to two tool results (3). Two instances taking turns see four more (chat or tool loop).
 */
const FOLLOW_MESSAGES = 3;
/** Prompt tokens credited to the key's home node when the index knows nothing better (prefix keys: chars / 4). */
export const DEFAULT_HOME_TOKENS = 512;
/** Share of the conversation before the last message that the home node is assumed to hold. */
const HOME_HISTORY_SHARE = 1;
/** Scraped KV-cache usage above which a node's cached prefix counts less and less (it evicts). */
const KV_EVICTING = 0.9;

const NO_BLOCKS = new Int32Array(0);

// A module-local copy of an imported binding: optimised code reads an import through its module
// cell, checked for initialisation, at every use; a local constant is folded into the code.
const FIXED_TOKENS = FIXED_WORK_TOKENS;
const BLOCK_TOKENS = PROMPT_BLOCK_TOKENS;
const Outcome = AffinityOutcome;

/** Cache-aware over a fixed member list. */
export class CacheAwarePolicy implements BalancePolicy {
  readonly kind = 'cache-aware';
  readonly weighsCost = true;
  readonly scoresPrefill = true;
  private readonly table: MemberTable;
  private readonly expected: ExpectedTtft;
  private readonly ring: HashRing;
  /** One prefix index per member slot. */
  readonly indexes: readonly PrefixIndex[];
  /** Unitless: a node queued above (1 + epsilon) × mean + spillFloor gets no cache credit. */
  private readonly epsilon: number;
  /** Tokens of queued prefill under which a node always keeps its cache credit. */
  private readonly spillFloor: number;
  /** Tokens credited to the home node when the index has nothing there. */
  private readonly homeTokens: number;
  /** Weight of the delay the request's prefill adds to each request in flight on a node (0: off). */
  private readonly stallWeight: number;
  /**
   * Moving average of the stale share: 1 for a request whose key this instance placed before and
   * that comes after turns another instance placed, 0 for one that follows this instance's own.
   * It starts at 1: the stall term comes in once this instance has seen that it places the turns
   * of its conversations itself (a conversation placed by load where other instances would not
   * look costs more than a conversation placed without the term).
   */
  staleShare = 1;
  /**
   * Where this instance last placed each affinity key, by the key's ring hash modulo the table size,
   * `PLACED_FIELDS` int32s per key (128 KiB in all): the hash + 1 (0: empty), the member slot, and
   * the turn it placed there and the one before (chat messages, prompt blocks, last block's hash).
   */
  private readonly placed: Int32Array;
  /** Scratch per slot: effective weight for the pick in progress (0 = not a candidate). */
  private readonly candidate: Float64Array;
  /** Slot the next scan starts at, so members with equal scores take turns. */
  private cursor = 0;

  constructor(members: readonly PoolMember[], options: BalanceOptions) {
    this.table = new MemberTable(members);
    const n = this.table.length;
    this.expected = new ExpectedTtft(
      this.table.nodes,
      options.decayMs,
      positive(options.cacheTokens, DEFAULT_CACHE_TOKENS),
      options.queueWeight,
      DEFAULT_CACHE_AWARE_QUEUE_WEIGHT,
    );
    const ppw = options.pointsPerWeight;
    this.ring = new HashRing(
      this.table.nodes.map((node) => node.id),
      this.table.weights,
      ppw !== undefined && ppw > 0 && ppw < Infinity ? ppw : DEFAULT_POINTS_PER_WEIGHT,
    );
    const cacheTokens = positive(options.cacheTokens, DEFAULT_CACHE_TOKENS);
    const maxBytes = positive(options.indexMaxBytes, DEFAULT_INDEX_MAX_BYTES);
    let blocks = Math.ceil(cacheTokens / BLOCK_TOKENS);
    // Each node's index takes 10–22 bytes per block (two tables sized for one entry per two blocks
    // of a generation's 2/3 of the capacity, at most half full, 8-byte slots: hash and stamp); fit
    // the pool's indexes under the bound.
    while (blocks > 16 && n * new PrefixIndex(blocks).memoryBytes > maxBytes) blocks = Math.floor(blocks / 2);
    this.indexes = this.table.nodes.map(() => new PrefixIndex(blocks));
    this.epsilon =
      options.epsilon !== undefined && options.epsilon >= 0 ? options.epsilon : DEFAULT_CACHE_EPSILON;
    this.spillFloor =
      options.spillFloorTokens !== undefined && options.spillFloorTokens >= 0
        ? options.spillFloorTokens
        : DEFAULT_CACHE_SPILL_FLOOR_TOKENS;
    this.homeTokens = positive(options.homeTokens, DEFAULT_HOME_TOKENS);
    const stall = options.stallWeight;
    this.stallWeight = stall !== undefined && stall >= 0 && stall < Infinity ? stall : DEFAULT_STALL_WEIGHT;
    this.placed = new Int32Array(PLACED_KEYS * PLACED_FIELDS);
    this.candidate = new Float64Array(n);
  }

  /** Bytes the pool's prefix indexes hold (fixed at build, under `indexMaxBytes`). */
  get indexBytes(): number {
    let b = 0;
    for (const ix of this.indexes) b += ix.memoryBytes;
    return b;
  }

  /**
   * The candidate with the lowest expected time to first token per unit of weight, its prompt
   * reduced by the prefix it likely holds; null when there is none. Writes `expectedTtftMs`,
   * `queuedMs`, `stallMs` (with a stall weight) and `cachedTokens` of the winner, and `affinityOutcome`: `hit` when the winner had
   * the largest cached estimate among the nodes scored (the home always is), `spill` when load sent
   * the request past one with more cached, `none` when none had anything cached. Then records the
   * request's prompt blocks in the winner's index.
   */
  pick(req: PickRequest, tried: readonly UpstreamNode[]): UpstreamNode | null {
    // HOT
    const { nodes, length } = this.table;
    const cand = this.candidate;
    const prompt = req.promptTokens;
    const expected = this.expected;
    const count = expected.prepare(prompt, req.cost, this.table.weights, tried, cand);
    req.affinityOutcome = Outcome.none;
    if (count === 0) return null;
    const rate = expected.rate;
    const bases = expected.base;
    const queued = expected.queued;
    const rooms = expected.room;
    // Queued work counts queueWeight times in the score (expected-ttft.ts), once in the estimate.
    const extra = expected.queueWeight - 1;
    const creditLimit = (1 + this.epsilon) * expected.queuedMean + this.spillFloor;
    const pb = req.promptBlocks === undefined ? null : req.promptBlocks();
    const blocks = pb === null ? NO_BLOCKS : pb.hashes;
    const n = blocks.length;
    const key = req.affinityKey;
    const keyHash = key === null ? 0 : affinityHashOf(req, key);
    let home = key === null ? -1 : this.homeSlot(keyHash);
    // The home is assumed to hold the key's prefix and the conversation so far (it served the
    // earlier turns unless load moved one): every instance then agrees where a conversation lives,
    // whatever its own index saw, and a conversation that load moved comes back next turn. With a
    // stall weight, load also places new conversations: the node this instance placed the key on
    // last takes the home's part.
    let stall = this.stallWeight;
    // Where this instance placed the key last (and the turn it placed there), if it did.
    const table = this.placed;
    const at = (keyHash & PLACED_KEYS_MASK) * PLACED_FIELDS;
    const messages = pb === null ? 0 : pb.messages;
    let seen = home >= 0 && table[at + P_KEY] === keyHash + 1;
    // The turn to compare with: the last one placed, or for that same turn again (a retry), the one
    // before it, so that every attempt of a request is judged alike.
    let turn = at + P_TURN;
    if (seen && messages === table[at + P_TURN + T_MESSAGES] && n === table[at + P_TURN + T_BLOCKS]) {
      turn = at + P_PREVIOUS;
      if (table[turn + T_MESSAGES] === 0 && table[turn + T_BLOCKS] === 0) seen = false;
    }
    // Stale: the request extends the prompt this instance placed last (same blocks up to its end)
    // by more messages than one turn adds: another instance sent the turns since, and what this
    // index holds of the conversation off its home is a turn this instance sent there before them.
    // Anything else this instance placed (the previous turn, a body without chat messages, another
    // conversation under the same key) it followed: its index speaks for the conversation.
    const lastBlocks = table[turn + T_BLOCKS]!;
    const stale =
      seen &&
      messages > table[turn + T_MESSAGES]! + FOLLOW_MESSAGES &&
      lastBlocks > 0 &&
      lastBlocks <= n &&
      blocks[lastBlocks - 1] === table[turn + T_HASH];
    const followed = seen && !stale;
    // Whether other instances place turns of this instance's conversations is learned from chat
    // bodies whose key this instance placed before, once per request (a retry repeats the turn
    // placed and is judged against the one before it: not counted again).
    if (seen && messages > 0 && turn === at + P_TURN)
      this.staleShare += ((stale ? 1 : 0) - this.staleShare) * STALE_SHARE_ALPHA;
    // Only placements by key can part ways between instances: a keyless request has the full weight.
    const share = this.staleShare;
    if (home >= 0 && share > STALL_FULL_SHARE)
      stall =
        share >= STALL_OFF_SHARE
          ? 0
          : (stall * (STALL_OFF_SHARE - share)) / (STALL_OFF_SHARE - STALL_FULL_SHARE);
    const homeTokens = this.homeTokens;
    if (stall > 0 && followed) {
      // Slots are this policy's own (a new member list builds a new policy); a placed node that is
      // down or tried leaves the key to its ring home.
      const slot = table[at + P_SLOT]!;
      if (cand[slot]! > 0) home = slot;
    }
    const history = home >= 0 && pb !== null ? pb.historyTokens : 0;
    const homeCredit =
      HOME_HISTORY_SHARE * history > this.homeTokens ? HOME_HISTORY_SHARE * history : this.homeTokens;

    let best = -1;
    let bestScore = Infinity; // ms per unit of weight
    let bestEstimate = 0; // ms
    let bestCached = 0; // tokens
    let bestMatched = 0; // blocks
    let bestInFlight = 0;
    let bestStall = 0; // ms
    let mostCached = 0; // tokens, the most any node scored holds
    // The home node first (k = -1): it usually sets a score that lets the others be skipped unread.
    let next = this.cursor;
    for (let k = home >= 0 ? -1 : 0; k < length; k++) {
      let i = home;
      if (k >= 0) {
        i = next;
        next = next + 1 === length ? 0 : next + 1;
        if (i === home) continue;
      }
      const w = cand[i]!;
      if (w === 0) continue;
      const r = rate[i]!;
      const b = bases[i]!;
      const node = nodes[i]!;
      // KV room left for the node's prefix cache once this request holds its own prompt and answer
      // beside the in-flight attempts (a node without room has the missing tokens in `q` already).
      const room = rooms[i]!;
      const q = queued[i]!;
      // Queued work as scored: q × queueWeight.
      const qs = q + extra * q;
      // The stall the request's prefill adds to the node's running requests, per prefill token
      // (written so that at 0 every bound below is the same arithmetic as without the term).
      const stalls = stall * node.inFlight;
      // Score = (b + r × (qs + own prefill + FIXED_WORK_TOKENS) + stall), ms. Not even a fully
      // cached prompt can beat the best so far: the node's index is not read.
      if ((b + r * (qs + 1 + FIXED_TOKENS + stalls * (1 + FIXED_TOKENS))) / w > bestScore) continue;
      const kv = node.scrapedKvUsage;
      // Share of its cached prefix a node keeps: less and less once its KV cache is nearly full.
      const keep = kv > KV_EVICTING ? (kv >= 1 ? 0 : (1 - kv) / (1 - KV_EVICTING)) : 1;
      let matched = 0;
      let evicted = false;
      if (n > 0 && keep > 0 && room > 0) {
        const index = this.indexes[i]!;
        let held = 0;
        // A node holds a prompt's blocks as a prefix (prefix-index.ts), so one probe near the block
        // it would need to hold to reach the best score settles most nodes. (A node queued past the
        // credit limit gets no credit; its index is read only for the hit/spill report.)
        if (i !== home && best >= 0 && q <= creditLimit) {
          const cachedNeeded =
            (qs + prompt + FIXED_TOKENS + stalls * (prompt + FIXED_TOKENS) - (bestScore * w - b) / r) /
            (1 + stalls);
          const blocksNeeded = cachedNeeded / (BLOCK_TOKENS * keep);
          // A stale conversation's credit off its home is capped at the key's prefix (below).
          if (blocksNeeded >= n + 2 || cachedNeeded > room || (stale && cachedNeeded > homeTokens)) continue;
          // Holding fewer than `need` blocks (one less than exact, against rounding) cannot win. An
          // int32, not Math.floor's double, which the call below would box.
          const need = (blocksNeeded | 0) - 1;
          if (need >= 1) {
            held = index.atLeast(blocks, need);
            if (held < 0) continue;
          }
        }
        matched = index.matchedBlocks(blocks, held);
        // The node's cache keeps the most recently used blocks that fit beside the in-flight
        // attempts' KV: a prefix last used more blocks ago than that room holds is evicted.
        if (matched > 0 && index.matchedAge * BLOCK_TOKENS > room) {
          matched = 0;
          evicted = true;
        }
      }
      let cached = matched * BLOCK_TOKENS;
      // A stale conversation is credited off its home with its key's prefix at most: the rest this
      // index holds there is an old turn, and every instance goes home to meet again.
      if (stale && i !== home && cached > homeTokens) cached = homeTokens;
      // The home's prior stands where this instance's index shows less of the conversation there.
      // Where this instance placed the previous turn, not if the index holds the prefix but too long
      // ago to still fit (evicted), nor once the index has forgotten more than the room holds: it
      // sent the turns and no longer holds them, so the node has evicted them too. Where another
      // instance sent the turns since, this index is no guide: the prior stands.
      if (
        i === home &&
        cached < homeCredit &&
        (!followed || (!evicted && this.indexes[i]!.forgottenAge * BLOCK_TOKENS <= room))
      ) {
        cached = homeCredit;
      }
      cached *= keep;
      if (cached > room) cached = room > 0 ? room : 0;
      if (cached > prompt - 1) cached = prompt > 1 ? prompt - 1 : 0;
      if (cached > mostCached) mostCached = cached;
      if (q > creditLimit) cached = 0;
      const estimate = b + r * (q + (prompt - cached) + FIXED_TOKENS);
      const stallMs = stalls * r * (prompt - cached + FIXED_TOKENS);
      const score = (estimate + extra * r * q + stallMs) / w;
      if (score < bestScore || (score === bestScore && node.inFlight < bestInFlight)) {
        best = i;
        bestScore = score;
        bestEstimate = estimate;
        bestCached = cached;
        bestMatched = matched;
        bestInFlight = node.inFlight;
        bestStall = stallMs;
      }
    }
    this.cursor = this.cursor + 1 === length ? 0 : this.cursor + 1;
    if (best < 0) return null;
    if (mostCached > 0) {
      req.affinityOutcome = bestCached >= mostCached ? Outcome.hit : Outcome.spill;
    }
    req.cachedTokens = bestCached;
    if (expected.probed) {
      req.expectedTtftMs = bestEstimate;
      req.queuedMs = rate[best]! * queued[best]!;
      if (this.stallWeight > 0) req.stallMs = bestStall;
    }
    if (n > 0) this.indexes[best]!.record(blocks, bestMatched);
    if (key !== null) this.place(at, keyHash, best, messages, blocks);
    return nodes[best]!;
  }

  /**
   * Records that the key of ring hash `keyHash` (its table entry at `at`) went to member slot `slot`
   * with a prompt of `messages` chat messages and block hashes `blocks`. A new turn moves the last
   * one to the previous; the same turn again (a retry) leaves both.
   */
  private place(at: number, keyHash: number, slot: number, messages: number, blocks: Int32Array): void {
    // HOT
    const t = this.placed;
    const n = blocks.length;
    const same = t[at + P_KEY] === keyHash + 1;
    if (!same || messages !== t[at + P_TURN + T_MESSAGES] || n !== t[at + P_TURN + T_BLOCKS]) {
      for (let f = 0; f < TURN_FIELDS; f++) t[at + P_PREVIOUS + f] = same ? t[at + P_TURN + f]! : 0;
      t[at + P_TURN + T_MESSAGES] = messages;
      t[at + P_TURN + T_BLOCKS] = n;
      t[at + P_TURN + T_HASH] = n > 0 ? blocks[n - 1]! : 0;
    }
    t[at + P_KEY] = keyHash + 1;
    t[at + P_SLOT] = slot;
  }

  /** Member slot of the key's home: the first candidate clockwise from its ring hash `hash`; -1 for none. */
  private homeSlot(hash: number): number {
    // HOT
    const ring = this.ring;
    const start = ring.locateHash(hash);
    if (start < 0) return -1;
    // A down or tried home passes its keys to the next candidate on the ring, as consistent-hash does.
    const owners = ring.owners;
    const limit = ring.size < 64 ? ring.size : 64;
    for (let k = 0, p = start; k < limit; k++, p = p + 1 === ring.size ? 0 : p + 1) {
      const slot = owners[p]!;
      if (this.candidate[slot]! > 0) return slot;
    }
    return -1;
  }
}

function positive(v: number | undefined, fallback: number): number {
  return v !== undefined && v > 0 && v < Infinity ? v : fallback;
}

/**
 * Factory for the `cache-aware` kind.
 *
 * @example
 * const policy = createCacheAware(members, { cacheTokens: 400_000, homeTokens: 600 });
 * const node = policy.pick(session, []); // session.cachedTokens: what it expects node to hold
 */
export function createCacheAware(members: readonly PoolMember[], options: BalanceOptions): BalancePolicy {
  return new CacheAwarePolicy(members, options);
}
