/**
 * Cache-aware balancing: the shared conformance suite, then its one score: expected time to first
 * token with the prefix a node likely holds taken off the prompt. The node holding a conversation
 * wins while its queue is short and loses once the wait outweighs the saving; an overloaded node
 * gets no credit; instances without shared state agree on a new key's home; KV pressure discounts
 * the credit; and the indexes stay within their memory bound over an hour of simulated traffic.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CacheAwarePolicy, createCacheAware } from '../../proxy/balance/cache-aware.js';
import type { BalanceOptions, PoolMember } from '../../proxy/balance/balance-policy.js';
import {
  FIXED_WORK_TOKENS,
  chargePrefill,
  recordFirstToken,
  settlePrefill,
} from '../../proxy/balance/node-timing.js';
import {
  PROMPT_BLOCK_CHARS,
  PROMPT_BLOCK_TOKENS,
  blockHashes,
  type PromptBlocks,
} from '../../proxy/balance/prompt-blocks.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { runPolicyConformance } from './conformance.js';
import { TestFleet, request, type TestRequest } from './fleet.js';

runPolicyConformance('cache-aware', createCacheAware);
runPolicyConformance('cache-aware with a stall weight', (ms, options) => oneInstance(ms, options), {
  stallWeight: 0.5,
});

const fleet = new TestFleet();
afterEach(() => fleet.close());

/**
 * A cache-aware policy that has seen that it places its conversations' turns itself (a stale share
 * of 0, as after about a hundred turns that follow its own), so that a stall weight counts in full.
 */
function oneInstance(ms: readonly PoolMember[], options: BalanceOptions): CacheAwarePolicy {
  const p = new CacheAwarePolicy(ms, options);
  p.staleShare = 0;
  return p;
}

/**
 * A request whose prompt is `text` (its blocks hashed), keyed by `key`; `history`: its history
 * tokens; `messages`: its chat messages (0: not a chat body).
 */
function chat(
  text: string,
  key: string | null = null,
  history = 0,
  messages = 0,
): TestRequest & { promptBlocks(): PromptBlocks } {
  const blocks: PromptBlocks = { hashes: blockHashes(text), historyTokens: history, messages };
  const prompt = Math.ceil(text.length / 4);
  return { ...request(key, prompt + 100, prompt), promptBlocks: () => blocks };
}

const words = (seed: string, blocks: number): string =>
  seed.repeat(Math.ceil((blocks * PROMPT_BLOCK_CHARS) / seed.length)).slice(0, blocks * PROMPT_BLOCK_CHARS);

/** Gives every node the same learned rate, ms per token. */
function rate(ms: readonly PoolMember[], msPerToken = 0.1): void {
  for (const m of ms) {
    m.node.timing.ttftRate.reset();
    m.node.timing.ttftRate.add(msPerToken * 1000, 1000, 1000, 10_000);
  }
}

function pick(policy: CacheAwarePolicy, req: TestRequest): UpstreamNode | null {
  return policy.pick(req, []);
}

/**
 * Two nodes at 0.1 ms per token and a cache-aware policy with `options` that has placed `text` once
 * (no key): the node that holds it now (`home`) and the other one.
 */
function placedOnOneOfTwo(
  options: BalanceOptions,
  text: string,
): { p: CacheAwarePolicy; home: UpstreamNode; other: UpstreamNode } {
  const ms = fleet.members(1, 1);
  rate(ms);
  const p = new CacheAwarePolicy(ms, options);
  const home = pick(p, chat(text))!;
  return { p, home, other: ms.find((m) => m.node !== home)!.node };
}

/** The prompt every node's index has forgotten in `placedThenForgotten` (2,560 tokens). */
const FORGOTTEN_OPENING = words('a late turn of a long conversation ', 40);

/**
 * Four nodes and one policy that placed `FORGOTTEN_OPENING` (conversation-7, 9 messages, history
 * 2,000) on its home; then every node's index drops generations of other traffic (its share of
 * 20,000 tokens is 208 blocks each) and every node runs 5,000 tokens of KV, so a turn's room
 * (20,000 − 5,000 − about 2,700) is under the 13,000 tokens the indexes forgot.
 */
function placedThenForgotten(): {
  ms: PoolMember[];
  p: CacheAwarePolicy;
  home: UpstreamNode;
  first: TestRequest;
} {
  const ms = fleet.members(1, 1, 1, 1);
  rate(ms);
  const p = new CacheAwarePolicy(ms, { cacheTokens: 20_000, spillFloorTokens: 1e9 });
  const first = chat(FORGOTTEN_OPENING, 'conversation-7', 2000, 9);
  const home = pick(p, first)!;
  for (const ix of p.indexes) {
    for (let i = 0; i < 20; i++) ix.record(blockHashes(words(`other conversation ${i} `, 40)));
  }
  for (const m of ms) m.node.inFlightCost = 5000;
  return { ms, p, home, first };
}

/**
 * Four nodes, two policies with `options` (two instances sharing nothing) and a conversation whose
 * turn k has 2k − 1 messages and 256 tokens more than turn k − 1 (turn 1: 2,816 tokens, 2,560 of
 * them history).
 */
function twoInstances(options: BalanceOptions): {
  ms: PoolMember[];
  a: CacheAwarePolicy;
  b: CacheAwarePolicy;
  turn: (k: number) => TestRequest;
} {
  const ms = fleet.members(1, 1, 1, 1);
  rate(ms);
  let text = words('a long conversation ', 40);
  const turn = (k: number): TestRequest => {
    const history = Math.ceil(text.length / 4);
    text += words(`turn ${k} of it `, 4);
    return chat(text, 'conversation-7', history, 2 * k - 1);
  };
  return { ms, a: new CacheAwarePolicy(ms, options), b: new CacheAwarePolicy(ms, options), turn };
}

describe('cache-aware policy', () => {
  it('reports its YAML kind and that it scores the prefill queue', () => {
    const p = createCacheAware(fleet.members(1), {});
    assert.equal(p.kind, 'cache-aware');
    assert.equal(p.scoresPrefill, true);
  });

  it('sends the next turn of a conversation to the node that served the last one, and says how much it expects cached', () => {
    const ms = fleet.members(1, 1, 1, 1);
    rate(ms);
    const p = new CacheAwarePolicy(ms, { stallWeight: 0 });
    const turn1 = words('history of session one ', 40);
    const first = pick(p, chat(turn1))!;
    const next = chat(turn1 + words('and a follow-up ', 8));
    assert.equal(pick(p, next), first);
    assert.equal(next.cachedTokens, 40 * PROMPT_BLOCK_TOKENS);
    assert.equal(next.affinityOutcome, 'hit');
    assert.equal(
      next.expectedTtftMs,
      0.1 * (next.promptTokens - 40 * PROMPT_BLOCK_TOKENS + FIXED_WORK_TOKENS),
    );
    assert.equal(next.queuedMs, 0);
    assert.equal(next.stallMs, -1, 'no stall term without a stall weight');
  });

  it('trades the saving against the wait: a node whose queue costs more than the cached prefix saves loses', () => {
    const history = words('long shared history ', 40); // 2,560 tokens
    const { p, home, other } = placedOnOneOfTwo({ spillFloorTokens: 1e9 }, history);
    const req = chat(history + words('new question ', 4)); // 2,816 tokens, 2,560 cached at home
    // Home: 0.1 × (queued + 256 + 128); other: 0.1 × (2,816 + 128). Home wins while queued < 2,560.
    chargePrefill(home, 2000);
    assert.equal(pick(p, req), home);
    chargePrefill(home, 1000);
    const spilled = chat(history + words('new question ', 4));
    assert.equal(pick(p, spilled), other);
    assert.equal(spilled.affinityOutcome, 'spill', 'load won over the cached prefix');
    assert.equal(spilled.cachedTokens, 0);
  });

  it('counts queued work queueWeight times against the saving and reports the estimate unweighted', () => {
    const history = words('long shared history ', 40); // 2,560 tokens
    const { p, home, other } = placedOnOneOfTwo({ spillFloorTokens: 1e9, queueWeight: 4 }, history);
    // Home: 0.1 × (4 × queued + 256 + 128); other: 0.1 × (2,816 + 128). Home wins while queued < 640.
    chargePrefill(home, 600);
    // Twice, so that each node is scored first once (the scan starts one member further each pick).
    for (const question of ['new question ', 'other question ']) {
      const req = chat(history + words(question, 4));
      assert.equal(pick(p, req), home);
      assert.equal(req.cachedTokens, 40 * PROMPT_BLOCK_TOKENS);
      assert.equal(req.expectedTtftMs, 0.1 * (600 + req.promptTokens - req.cachedTokens + FIXED_WORK_TOKENS));
    }
    chargePrefill(home, 100);
    const spilled = chat(history + words('third question ', 4));
    assert.equal(pick(p, spilled), other, 'at weight 1 the home would win up to 2,560 queued');
    assert.equal(spilled.affinityOutcome, 'spill');
  });

  it('with a stall weight, places a new conversation by the requests in flight too, and sends its next turn where it placed it', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const opening = words('opening of conversation s ', 4); // 256 tokens
    const home = pick(new CacheAwarePolicy(ms, { stallWeight: 0 }), chat(opening, 's'))!;
    const other = ms.find((m) => m.node !== home)!.node;
    home.inFlight = 6;
    try {
      // Without it the home wins: 0.1 × (1 + 128) = 12.9 against 0.1 × (256 + 128) = 38.4.
      assert.equal(pick(new CacheAwarePolicy(ms, { stallWeight: 0 }), chat(opening, 's')), home);
      // Weight 0.5: the home's prefill would stall its 6 running requests, 12.9 + 0.5 × 6 × 12.9 = 51.6.
      const p = oneInstance(ms, { stallWeight: 0.5 });
      assert.equal(pick(p, chat(opening, 's')), other);
      // The home is free again and the other node runs one request: the second turn still goes where
      // this instance placed the first (0.1 × (1 + 128) × 1.5 = 19.35 against 0.1 × (512 + 128) = 64
      // at the home, which holds nothing of it).
      home.inFlight = 0;
      other.inFlight = 1;
      const turn2 = (): TestRequest => chat(opening + words('second turn of s ', 4), 's', 256);
      const second = turn2();
      assert.equal(pick(p, second), other);
      assert.equal(second.affinityOutcome, 'hit');
      assert.ok(
        Math.abs(second.stallMs - 0.5 * 1 * 0.1 * (1 + FIXED_WORK_TOKENS)) < 1e-9,
        `${second.stallMs}`,
      );
      // An instance that did not place it credits the ring's home with the conversation instead.
      assert.equal(pick(oneInstance(ms, { stallWeight: 0.5 }), turn2()), home);
    } finally {
      home.inFlight = 0;
      other.inFlight = 0;
    }
  });

  it('with a stall weight, stops weighing the stall once other instances place the turns between its own', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const opening = (k: number): string => words(`opening of conversation ${k} `, 4); // 256 tokens
    const p = new CacheAwarePolicy(ms, { stallWeight: 0.5 });
    /**
     * Where `p` places the first turn of a new conversation `key` while the key's home runs 6
     * requests (the home: where a policy without the stall weight places it), and the stall it
     * charged: with the weight, the home's prefill would stall them (the test above).
     */
    const newConversation = (key: string): { atHome: boolean; stallMs: number } => {
      const text = words(`opening of conversation ${key} `, 4);
      const home = pick(new CacheAwarePolicy(ms, { stallWeight: 0 }), chat(text, key))!;
      home.inFlight = 6;
      try {
        const req = chat(text, key);
        return { atHome: pick(p, req) === home, stallMs: req.stallMs };
      } finally {
        home.inFlight = 0;
      }
    };
    // Until it has seen whether other instances place turns of its conversations, no stall.
    assert.equal(p.staleShare, 1);
    assert.deepEqual(newConversation('r'), { atHome: true, stallMs: 0 });
    // One instance: each turn follows the one it placed (two messages more).
    for (let k = 0; k < 120; k++) {
      pick(p, chat(opening(k), `c${k}`, 0, 2));
      pick(p, chat(opening(k) + words(`second turn of ${k} `, 4), `c${k}`, 256, 4));
    }
    assert.ok(p.staleShare < 0.05, `stale share ${p.staleShare}`);
    assert.equal(newConversation('s').atHome, false);
    // Another instance takes turns: the turn after this instance's own has four messages more (the
    // one between went through the other instance). 80 such stale turns: the share passes 20 %.
    for (let k = 120; k < 200; k++) {
      pick(p, chat(opening(k), `c${k}`, 0, 2));
      pick(p, chat(opening(k) + words(`turns two and three of ${k} `, 8), `c${k}`, 512, 6));
    }
    assert.ok(p.staleShare > 0.2, `stale share ${p.staleShare}`);
    // Placed as without the stall weight now; the home's 6 running requests are charged no stall.
    assert.deepEqual(newConversation('u'), { atHome: true, stallMs: 0 });
  });

  it('with a stall weight, weighs it in part between 5 and 20 % stale, in full for keyless requests, and learns only from first attempts of chat turns', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const text = words('opening of conversation h ', 4); // 256 tokens
    const home = pick(new CacheAwarePolicy(ms, { stallWeight: 0 }), chat(text, 'h'))!;
    home.inFlight = 6;
    try {
      // At a share of 0.125, halfway between 0.05 and 0.2, half the weight: the home's own prefill
      // 0.1 × (1 + 128) = 12.9 plus its stall 0.25 × 6 × 12.9 = 19.35 beats the other node's 38.4
      // (at the full 0.5 it would be 38.7 more and lose: the tests above).
      const half = new CacheAwarePolicy(ms, { stallWeight: 0.5 });
      half.staleShare = 0.125;
      const req = chat(text, 'h');
      assert.equal(pick(half, req), home);
      assert.ok(Math.abs(req.stallMs - 19.35) < 1e-9, `${req.stallMs}`);
    } finally {
      home.inFlight = 0;
    }
    // A keyless request has the full weight whatever the share (no placement by key to part ways
    // over): the busy node that holds its history loses to its stall at 7 in flight (the test below).
    const history = words('long history of a keyless conversation ', 40);
    const p = new CacheAwarePolicy(ms, { stallWeight: 1 });
    assert.equal(p.staleShare, 1);
    p.indexes[1]!.record(blockHashes(history), 0);
    ms[1]!.node.inFlight = 7;
    try {
      assert.equal(pick(p, chat(history + words('one more question ', 4))), ms[0]!.node);
    } finally {
      ms[1]!.node.inFlight = 0;
    }
    // The share moves with a chat turn that follows this instance's own, once: not again for the
    // same turn sent again (a retry), nor for keyed bodies without chat messages.
    const q = new CacheAwarePolicy(ms, { stallWeight: 0.5 });
    const turn1 = words('first turn of conversation q ', 4);
    const turn2 = turn1 + words('second turn of conversation q ', 4);
    pick(q, chat(turn1, 'q', 0, 2));
    pick(q, chat(turn2, 'q', 256, 4));
    assert.equal(q.staleShare, 1 - 1 / 32);
    for (let i = 0; i < 5; i++) pick(q, chat(turn2, 'q', 256, 4));
    assert.equal(q.staleShare, 1 - 1 / 32, 'retries');
    pick(q, chat(turn1, 'completion', 0, 0));
    for (let i = 0; i < 5; i++)
      pick(q, chat(turn1 + words(`more text ${i} `, 4 * (i + 1)), 'completion', 0, 0));
    assert.equal(q.staleShare, 1 - 1 / 32, 'bodies without chat messages');
  });

  it('with a stall weight, reads the index of a busy node scanned second exactly up to where its stall outweighs its cached prefix', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const history = words('long history of a keyless conversation ', 40); // 2,560 tokens
    const busy = ms[1]!.node;
    // Scored second (a fresh policy scans from slot 0), holding the history, running `inFlight`:
    // 0.1 × (256 + 128) × (1 + inFlight) against the idle node's 0.1 × (2,816 + 128) = 294.4, so it
    // wins up to 6 requests in flight (268.8) and loses at 7 (307.2). Pruned with a wrong bound,
    // its index would not be read and the idle node would win at 6 too.
    const winnerAt = (inFlight: number): UpstreamNode | null => {
      const p = oneInstance(ms, { stallWeight: 1 });
      p.indexes[1]!.record(blockHashes(history), 0);
      busy.inFlight = inFlight;
      try {
        return pick(p, chat(history + words('one more question ', 4)));
      } finally {
        busy.inFlight = 0;
      }
    };
    assert.equal(winnerAt(6), busy);
    assert.equal(winnerAt(7), ms[0]!.node);
  });

  it('withdraws the cache credit from a node queued far above the pool mean', () => {
    const ms = fleet.members(1, 1, 1);
    rate(ms);
    const p = new CacheAwarePolicy(ms, { epsilon: 1, spillFloorTokens: 1000 });
    const history = words('hot conversation ', 200); // 12,800 tokens: a big saving
    const home = pick(p, chat(history))!;
    // Mean queue 3,000 → limit 2 × 3,000 + 1,000 = 7,000: the home node at 9,000 gets no credit.
    chargePrefill(home, 9000);
    const req = chat(history);
    assert.notEqual(pick(p, req), home);
    assert.equal(req.affinityOutcome, 'spill');
  });

  it('sends a new key to the same home node in every instance, without shared state', () => {
    const ms = fleet.members(1, 1, 1, 1);
    rate(ms);
    const a = new CacheAwarePolicy(ms, { homeTokens: 150 });
    const b = new CacheAwarePolicy(ms, { homeTokens: 150 });
    for (let i = 0; i < 40; i++) {
      const text = words(`session ${i} opening `, 4);
      const ra = chat(text, `key-${i}`);
      const rb = chat(text, `key-${i}`);
      assert.equal(pick(a, ra), pick(b, rb), `key-${i}`);
    }
    // Not all to one node: the keys spread over the ring.
    const homes = new Set(Array.from({ length: 40 }, (_, i) => pick(a, chat(words(`x${i} `, 2), `k${i}`))));
    assert.ok(homes.size >= 3);
  });

  it('brings a conversation its index knows nothing of back to its home, credited with its history', () => {
    const ms = fleet.members(1, 1, 1, 1);
    rate(ms);
    // 2,560 tokens, 2,000 of them before the last message
    const turn = (): TestRequest =>
      chat(words('a late turn of a long conversation ', 40), 'conversation-7', 2000);
    const home = pick(new CacheAwarePolicy(ms, {}), turn())!;
    const fresh = turn();
    assert.equal(pick(new CacheAwarePolicy(ms, {}), fresh), home, 'another instance, another index');
    assert.equal(fresh.cachedTokens, 2000);
    // Home: 0.1 × (2,500 + 560 + 128) > elsewhere 0.1 × (2,560 + 128): the wait outweighs the credit.
    chargePrefill(home, 2500);
    assert.notEqual(pick(new CacheAwarePolicy(ms, {}), turn()), home);
  });

  it('counts a cached prefix for less on a node whose scraped KV cache is nearly full', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const p = new CacheAwarePolicy(ms, {});
    const history = words('some history ', 20);
    const home = pick(p, chat(history))!;
    home.scrapedKvUsage = 0.95; // halfway from 0.9 to full: half the credit
    const req = chat(history);
    assert.equal(pick(p, req), home);
    assert.ok(Math.abs(req.cachedTokens - 0.5 * 20 * PROMPT_BLOCK_TOKENS) < 1e-6, String(req.cachedTokens));
    home.scrapedKvUsage = 1;
    const full = chat(history);
    pick(p, full);
    assert.equal(full.affinityOutcome, 'none', 'a full KV cache holds nothing it can keep');
  });

  it('gives no credit for a prefix last used longer ago than the KV room beside the in-flight attempts holds', () => {
    const ms = fleet.members(1, 1);
    rate(ms);
    const p = new CacheAwarePolicy(ms, { cacheTokens: 20_000, spillFloorTokens: 1e9 });
    // A conversation (1,280 tokens) on its node, then 100 blocks (6,400 tokens) of other prompts
    // sent there; its next turn (1,536 tokens, 1,636 of KV with its answer).
    const aged = (name: string): { node: UpstreamNode; next: TestRequest } => {
      const history = words(`${name} conversation `, 20);
      const node = pick(p, chat(history))!;
      const index = p.indexes[ms.findIndex((m) => m.node === node)]!;
      for (let i = 0; i < 5; i++) index.record(blockHashes(words(`${name} other prompt ${i} `, 20)));
      return { node, next: chat(history + words(`${name} follow-up `, 4)) };
    };
    const a = aged('first');
    assert.equal(pick(p, a.next), a.node);
    assert.equal(a.next.cachedTokens, 20 * PROMPT_BLOCK_TOKENS, 'room 20,000 − 1,636: still held');
    // With 12,000 tokens in flight there, its cache keeps what fits in 20,000 − 12,000 − 1,636
    // tokens: the conversation, 6,400 tokens down the LRU order, is evicted.
    const b = aged('second');
    b.node.inFlightCost = 12_000;
    pick(p, b.next);
    assert.equal(b.next.cachedTokens, 0);
    assert.notEqual(b.next.affinityOutcome, 'hit');
  });

  it('does not credit the home with a conversation whose previous turn it placed there once its index forgot more than the room holds', () => {
    const { ms, p, home, first } = placedThenForgotten();
    assert.equal(first.cachedTokens, 2000, 'nothing forgotten yet: the prior stands');
    assert.ok(p.indexes[ms.findIndex((m) => m.node === home)]!.forgottenAge * PROMPT_BLOCK_TOKENS > 13_000);
    const next = (more: number, text = FORGOTTEN_OPENING + words('and then ', 1)): TestRequest =>
      chat(text, 'conversation-7', 2000, 9 + more);
    // Three messages more (a tool call and two results): the previous turn, which this instance
    // placed and its index no longer holds: evicted.
    const followed = next(3);
    pick(p, followed);
    assert.equal(followed.cachedTokens, 0, 'the room holds less than the index forgot');
    // Another conversation under the same key (its prompt does not extend the one placed last):
    // also this instance's own, judged by its index.
    const other = next(7, words('another conversation on the key ', 41));
    pick(p, other);
    assert.equal(other.cachedTokens, 0);
  });

  it('takes a turn that extends the one it placed by four messages or more as placed by another instance, every attempt alike', () => {
    const { p, home } = placedThenForgotten();
    // Four messages more: another instance placed the turn between; the home's prior stands.
    const stale = chat(FORGOTTEN_OPENING + words('two turns on ', 1), 'conversation-7', 2000, 13);
    assert.equal(pick(p, stale), home);
    assert.equal(stale.cachedTokens, 2000);
    // Its retry (the home failed): the next node on the ring is its home now, judged the same way,
    // although the first attempt was recorded as this key's last turn.
    const retry = p.pick(stale, [home]);
    assert.notEqual(retry, home);
    assert.equal(stale.cachedTokens, 2000);
  });

  it('keeps a conversation on its home in two instances that each placed every other turn, even where either index says it was evicted', () => {
    const { ms, a, b, turn } = twoInstances({ cacheTokens: 20_000, spillFloorTokens: 1e9 });
    const home = pick(b, turn(1))!;
    const h = ms.findIndex((m) => m.node === home);
    // The home has 1,000 tokens of prefill queued: credited with the conversation it wins
    // (0.1 × (1,000 + 256 + 128) ms against 0.1 × (3,072 + 128) ms on an idle node); without
    // any credit it loses.
    chargePrefill(home, 1000);
    assert.equal(pick(a, turn(2)), home, 'a never placed it: its index is no guide');
    // Both indexes of the home now record other traffic: 7,680 tokens since either saw the
    // conversation, more than the home's KV room beside 10,000 tokens in flight (6,572 tokens for
    // turn 3, less for later ones).
    for (const p of [a, b]) {
      for (let i = 0; i < 6; i++) p.indexes[h]!.record(blockHashes(words(`other prompt ${i} `, 20)));
    }
    home.inFlightCost = 10_000;
    for (let k = 3; k <= 6; k++) {
      const req = turn(k);
      assert.equal(pick(k % 2 === 0 ? a : b, req), home, `turn ${k}`);
      assert.equal(req.cachedTokens, 2560 + 256 * (k - 1), `turn ${k}: the conversation so far`);
    }
    // One instance placing two turns in a row follows its own index: the prefix it holds there
    // is evicted (7,680 tokens of other prompts since, room 5,548), so no credit.
    for (let i = 0; i < 6; i++) a.indexes[h]!.record(blockHashes(words(`more prompts ${i} `, 20)));
    const again = turn(7);
    pick(a, again);
    assert.equal(again.cachedTokens, 0);
  });

  it('brings a conversation back home in two instances after one of them spilled a turn, whatever that one holds elsewhere', () => {
    const { a, b, turn } = twoInstances({});
    const home = pick(b, turn(1))!;
    // A burst on the home: a spills turn 2 (0.1 × (5,000 + 256 + 128) ms there, 0.1 × (3,072 + 128)
    // ms on an idle node).
    chargePrefill(home, 5000);
    const spilled = pick(a, turn(2))!;
    assert.notEqual(spilled, home);
    // The burst drains to 1,000 tokens: b sends turn 3 home.
    settlePrefill(home, 5000);
    chargePrefill(home, 1000);
    assert.equal(pick(b, turn(3)), home);
    // a's index holds turn 2 (3,072 tokens) where it spilled it: counted in full, that node would
    // win (0.1 × (3,584 − 3,072 + 128) ms against 0.1 × (1,000 + 256 + 128) ms at home). But b sent
    // turn 3 since, so a credits it there with the key's prefix only and goes home too.
    const fourth = turn(4);
    assert.equal(pick(a, fourth), home);
    assert.equal(fourth.cachedTokens, 2560 + 3 * 256, 'the conversation so far');
  });

  it('counts the KV a node lacks for the request as queued work and credits it with no cached prefix', () => {
    const history = words('a conversation ', 40); // 2,560 tokens
    const { p, home, other } = placedOnOneOfTwo({ cacheTokens: 20_000, spillFloorTokens: 1e9 }, history);
    home.inFlightCost = 19_000; // the request (2,660) does not fit: 1,660 tokens short
    const req = chat(history);
    assert.equal(pick(p, req), other);
    assert.equal(req.cachedTokens, 0);
  });

  it('keeps its indexes under the configured memory bound through an hour of simulated traffic', () => {
    const ms = fleet.members(...Array.from({ length: 16 }, () => 1));
    const bound = 1024 * 1024;
    const p = new CacheAwarePolicy(ms, { cacheTokens: 400_000, indexMaxBytes: bound });
    assert.ok(p.indexBytes <= bound, `${p.indexBytes} bytes allocated`);
    // One hour at 10 requests/s of multi-turn sessions (2–8 turns of ~1,000 tokens over 8 system
    // prompts of ~2,000), simulated time: every request's first token arrives 200 ms after dispatch.
    const sessions: { system: number; history: string; turns: number }[] = [];
    let uniq = 0;
    const hourMs = 3_600_000;
    const heapBefore = process.memoryUsage().heapUsed;
    let hits = 0;
    let requests = 0;
    for (let t = 0; t < hourMs; t += 100) {
      const slot = requests % 64;
      let s = sessions[slot];
      if (s === undefined || s.turns === 0) {
        s = { system: uniq % 8, history: '', turns: 2 + (uniq % 7) };
        s.history = words(`system prompt ${s.system} `, 31) + words(`user ${uniq++} asks `, 16);
        sessions[slot] = s;
      } else {
        s.history += words(`reply and next question ${uniq++} `, 16);
      }
      s.turns--;
      const req = chat(s.history, `session-${slot}-${s.system}`);
      const node = pick(p, req)!;
      const own = req.promptTokens - Math.max(0, req.cachedTokens);
      const ahead = chargePrefill(node, own);
      recordFirstToken(node, own, ahead, 200, t + 200, 10_000);
      if (req.cachedTokens > 512) hits++;
      requests++;
      assert.ok(p.indexBytes <= bound);
    }
    assert.equal(requests, 36_000);
    for (const ix of p.indexes) assert.ok(ix.size <= 2 * ix.generationEntries);
    assert.ok(hits > requests / 4, `follow-up turns found their history: ${hits} of ${requests}`);
    // Nothing grows with the traffic (allow for the test's own strings and the collector's timing).
    const grown = process.memoryUsage().heapUsed - heapBefore;
    assert.ok(grown < 64 * 1024 * 1024, `heap grew ${grown} bytes`);
  });
});
