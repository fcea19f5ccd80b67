/**
 * The workload generator: the same seed gives the same requests; tenants carry their keys; chat
 * sessions share a system prompt and grow their history with the replies; the hot key and
 * embedding bursts appear as configured; length presets and arrival schedules have the right
 * statistics.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  LENGTH_PRESETS,
  parseLengthDist,
  sampleLength,
  type LengthDist,
} from '../../loadtest/scenario/length-dist.js';
import type { ChatMix, EmbeddingMix, WorkloadSpec } from '../../loadtest/scenario/scenario-types.js';
import { SeededRandom } from '../../loadtest/sim/prng.js';
import { ArrivalSchedule } from '../../loadtest/workload/arrival-schedule.js';
import { RequestSource } from '../../loadtest/workload/request-source.js';

const fixed = (value: number): LengthDist => ({ kind: 'fixed', value });

function chat(overrides: Partial<ChatMix> = {}): ChatMix {
  return {
    kind: 'chat',
    weight: 1,
    burst: 1,
    stream: true,
    systemPromptTokens: 100,
    systemPrompts: 1,
    turns: fixed(3),
    userTokens: fixed(20),
    outputTokens: fixed(8),
    hotShare: 0,
    hotKey: 'hot',
    repeatDistinct: 0,
    repeatZipf: 1,
    ...overrides,
  };
}

function workload(mix: (ChatMix | EmbeddingMix)[], sessions = 4): WorkloadSpec {
  return {
    model: 'm',
    embeddingModel: 'e',
    sessions,
    sessionZipf: 0,
    mix,
    tenants: [
      { name: 'a', apiKey: 'key-a', rate: null, weight: 3 },
      { name: 'b', apiKey: null, rate: null, weight: 1 },
    ],
  };
}

interface ChatBody {
  messages: { role: string; content: string }[];
  max_tokens: number;
  stream?: boolean;
}

describe('request source', () => {
  it('plans the same requests from the same seed', () => {
    const one = new RequestSource(workload([chat({ turns: fixed(1) })]), 9, 32768);
    const two = new RequestSource(workload([chat({ turns: fixed(1) })]), 9, 32768);
    for (let i = 0; i < 50; i++) {
      const [x, y] = [one.next(), two.next()];
      assert.deepEqual([x.tenant, x.headers, x.body], [y.tenant, y.headers, y.body]);
      x.session?.finish('reply');
      y.session?.finish('reply');
    }
    const other = new RequestSource(workload([chat({ turns: fixed(1) })]), 10, 32768);
    assert.notEqual(
      other.next().body,
      new RequestSource(workload([chat({ turns: fixed(1) })]), 9, 32768).next().body,
    );
  });

  it('sends tenant keys as bearer tokens, in proportion to the weights', () => {
    const source = new RequestSource(workload([chat({ turns: fixed(1) })]), 1, 32768);
    const counts = [0, 0];
    for (let i = 0; i < 4000; i++) {
      const r = source.next();
      counts[r.tenant] = (counts[r.tenant] ?? 0) + 1;
      assert.equal(r.headers['authorization'], r.tenant === 0 ? 'Bearer key-a' : undefined);
      r.session?.finish('ok');
    }
    assert.ok(Math.abs((counts[0] ?? 0) / 4000 - 0.75) < 0.03, `tenant a share ${counts[0]}`);
  });

  it('grows a session turn by turn with the replies, under one session id and system prompt', () => {
    const source = new RequestSource(workload([chat()], 1), 1, 32768);
    const turns = [0, 1, 2].map((i) => {
      const r = source.arrival(0)[0];
      assert.ok(r !== undefined && r.session !== null);
      r.session.finish(`reply ${i}`);
      return { id: r.headers['x-session-id'], body: JSON.parse(r.body) as ChatBody };
    });
    assert.equal(new Set(turns.map((t) => t.id)).size, 1);
    const [first, , third] = turns.map((t) => t.body);
    assert.equal(first?.messages.length, 2);
    assert.equal(first?.messages[0]?.role, 'system');
    assert.equal(first?.messages[0]?.content.length, 400);
    assert.deepEqual(
      third?.messages.map((m) => m.role),
      ['system', 'user', 'assistant', 'user', 'assistant', 'user'],
    );
    assert.equal(third?.messages[2]?.content, 'reply 0');
    assert.equal(third?.messages[4]?.content, 'reply 1');
    assert.equal(third?.stream, true);
    const fourth = source.arrival(0)[0];
    assert.notEqual(fourth?.headers['x-session-id'], turns[0]?.id, 'a session ends after its turns');
  });

  it('sends a chat burst as that many turns of different sessions at one arrival', () => {
    const source = new RequestSource(workload([chat({ burst: 4 })], 8), 1, 32768);
    const burst = source.arrival(0);
    assert.equal(burst.length, 4);
    assert.equal(new Set(burst.map((r) => r.headers['x-session-id'])).size, 4);
  });

  it('sends most turns to a few hot conversations with session_zipf', () => {
    const spec = { ...workload([chat({ turns: fixed(1000) })], 32), sessionZipf: 1.2 };
    const source = new RequestSource(spec, 1, 1 << 30);
    const counts = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      const r = source.arrival(0)[0]!;
      r.session!.finish('ok');
      const id = r.headers['x-session-id']!;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    const top = [...counts.values()].sort((a, b) => b - a);
    assert.ok(top[0]! > 2000 * 0.2, `hottest conversation ${top[0]} of 2000`);
    assert.ok(top[0]! + top[1]! + top[2]! > 2000 * 0.45, `top three ${top.slice(0, 3).join(', ')}`);
  });

  it('never sends a second turn of a session while the first is in flight', () => {
    const source = new RequestSource(workload([chat({ turns: fixed(5) })], 2), 1, 32768);
    const ids = [0, 1, 2].map(() => source.arrival(0)[0]?.headers['x-session-id']);
    assert.equal(new Set(ids).size, 3);
    assert.equal(source.stats().sessionOverflows, 1);
  });

  it('sends the hot key on its share of requests, and embedding arrivals as bursts', () => {
    const source = new RequestSource(workload([chat({ hotShare: 0.3, turns: fixed(1) })]), 1, 32768);
    let hot = 0;
    for (let i = 0; i < 2000; i++) {
      const r = source.next();
      if (r.kind === 'hot-key') {
        hot++;
        assert.equal(r.headers['x-session-id'], 'hot');
      }
      r.session?.finish('x');
    }
    assert.ok(Math.abs(hot / 2000 - 0.3) < 0.04, `hot share ${hot / 2000}`);
    const embed: EmbeddingMix = { kind: 'embedding', weight: 1, burst: 5, inputTokens: fixed(16), items: 1 };
    const burst = new RequestSource(workload([embed]), 1, 32768).arrival(1);
    assert.equal(burst.length, 5);
    for (const r of burst) {
      assert.equal(r.path, '/v1/embeddings');
      assert.equal((JSON.parse(r.body) as { input: string }).input.length, 64);
    }
  });
});

describe('length distributions and arrivals', () => {
  it('samples the Azure conversation presets around their published medians', () => {
    const rng = SeededRandom.fromText('lengths');
    for (const [name, median] of [
      ['azure-conversation-input', 1020],
      ['azure-conversation-output', 129],
    ] as const) {
      const dist = LENGTH_PRESETS[name] as LengthDist;
      const xs = Array.from({ length: 20_000 }, () => sampleLength(dist, rng)).sort((a, b) => a - b);
      const p50 = xs[10_000] ?? 0;
      assert.ok(Math.abs(p50 / median - 1) < 0.05, `${name} median ${p50}`);
      assert.ok((xs[19_999] ?? 0) <= (dist.kind === 'lognormal' ? dist.max : Infinity));
    }
  });

  it('interpolates empirical percentile tables', () => {
    const dist = parseLengthDist({ dist: 'empirical', percentiles: { 0: 10, 50: 20, 100: 120 } });
    assert.ok(!Array.isArray(dist));
    const rng = SeededRandom.fromText('emp');
    const xs = Array.from({ length: 10_000 }, () => sampleLength(dist, rng)).sort((a, b) => a - b);
    assert.ok(Math.abs((xs[5000] ?? 0) - 20) <= 1);
    assert.ok((xs[0] ?? 0) >= 10 && (xs[9999] ?? 0) <= 120);
  });

  it('offers each stream its rate, evenly or with Poisson gaps', () => {
    for (const poisson of [false, true]) {
      const schedule = new ArrivalSchedule([100, 10], poisson, SeededRandom.fromText('arrivals'));
      const counts = [0, 0];
      let last = 0;
      for (;;) {
        const a = schedule.shift();
        if (a === undefined || a.atMs >= 10_000) break;
        assert.ok(a.atMs >= last, 'arrivals come in time order');
        last = a.atMs;
        counts[a.stream] = (counts[a.stream] ?? 0) + 1;
      }
      assert.ok(Math.abs((counts[0] ?? 0) - 1000) <= (poisson ? 100 : 1), `stream 0: ${counts[0]}`);
      assert.ok(Math.abs((counts[1] ?? 0) - 100) <= (poisson ? 30 : 1), `stream 1: ${counts[1]}`);
    }
  });
});

describe('repeated requests (a cache workload)', () => {
  it('draws temperature-0 requests from the distinct prompts, popular ones most, the same in every run', () => {
    const mix = chat({
      turns: fixed(1),
      stream: false,
      repeatDistinct: 50,
      repeatZipf: 1,
      userTokens: fixed(10),
    });
    const bodies = (seed: number): string[] => {
      const src = new RequestSource(workload([mix]), seed, 32768);
      return Array.from({ length: 2000 }, () => src.next().body);
    };
    const a = bodies(5);
    assert.deepEqual(a, bodies(5));
    const counts = new Map<string, number>();
    for (const b of a) counts.set(b, (counts.get(b) ?? 0) + 1);
    assert.ok(counts.size <= 50 && counts.size > 30, `${counts.size} distinct`);
    const first = JSON.parse(a[0]!) as { temperature: number; stream?: boolean; messages: unknown[] };
    assert.equal(first.temperature, 0);
    assert.equal(first.stream, undefined);
    assert.equal(first.messages.length, 1);
    // Zipf(1) over 50: the most popular prompt gets about 1 / H(50) = 22 % of requests.
    const top = Math.max(...counts.values());
    assert.ok(top > 2000 * 0.15 && top < 2000 * 0.3, `top prompt ${top} of 2000`);
  });
});
