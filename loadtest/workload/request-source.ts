/**
 * Plans requests from a workload: picks the tenant and the request kind by weight, draws lengths,
 * builds chat turns from the tenant's session pool (or the hot key) and embedding bursts, and writes
 * the OpenAI JSON bodies. Every choice comes from generators seeded by the scenario seed, one per
 * concern, so the same seed gives the same requests (session turns also depend on which replies
 * have come back).
 */

import { CHARS_PER_TOKEN } from '../sim/outputs.js';
import { SeededRandom } from '../sim/prng.js';
import type { ChatMix, EmbeddingMix, WorkloadSpec } from '../scenario/scenario-types.js';
import { sampleLength } from '../scenario/length-dist.js';
import { ChatSession, SessionPool } from './chat-session.js';
import { fillerText } from './filler-text.js';
import { RequestKind, type ChatMessage, type PlannedRequest } from './planned-request.js';

/** Picks an index with probability proportional to its weight. */
export class WeightedPicker {
  private readonly cumulative: number[] = [];

  constructor(weights: readonly number[]) {
    let sum = 0;
    for (const w of weights) this.cumulative.push((sum += w));
  }

  /** An index in [0, weights.length). */
  pick(rng: SeededRandom): number {
    const total = this.cumulative.at(-1) ?? 0;
    const x = rng.nextFloat() * total;
    let lo = 0;
    let hi = this.cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (x < (this.cumulative[mid] as number)) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}

/** Counters of the source, for the result. */
export interface SourceStats {
  /** Chat sessions started. */
  sessionsStarted: number;
  /** Turns that found every session of their tenant busy and went out as a one-off session. */
  sessionOverflows: number;
}

/** The counters of `now` less those of an earlier snapshot `before`: what happened in between. */
export function statsSince(before: SourceStats, now: SourceStats): SourceStats {
  return {
    sessionsStarted: now.sessionsStarted - before.sessionsStarted,
    sessionOverflows: now.sessionOverflows - before.sessionOverflows,
  };
}

/** Plans the requests of one run. */
export class RequestSource {
  private readonly tenantRng: SeededRandom;
  private readonly kindRng: SeededRandom;
  private readonly lengthRng: SeededRandom;
  private readonly textRng: SeededRandom;
  private readonly sessionRng: SeededRandom;
  private readonly tenants: WeightedPicker;
  private readonly kinds: WeightedPicker;
  private readonly pools = new Map<string, SessionPool>();
  private readonly systemPrompts = new Map<string, string>();
  /** Repeated prompts' bodies, by mix index and prompt index, built on first use. */
  private readonly repeated = new Map<string, string>();
  private readonly repeatPickers = new Map<number, WeightedPicker>();
  private sessionsStarted = 0;

  /**
   * @param workload - the resolved workload
   * @param seed - the scenario seed
   * @param maxModelLen - context limit of the nodes in tokens; sessions that would pass it restart
   */
  constructor(
    private readonly workload: WorkloadSpec,
    private readonly seed: number,
    private readonly maxModelLen: number,
  ) {
    const rng = (what: string): SeededRandom => SeededRandom.fromText(`${seed}/${what}`);
    this.tenantRng = rng('tenant');
    this.kindRng = rng('kind');
    this.lengthRng = rng('length');
    this.textRng = rng('text');
    this.sessionRng = rng('session');
    this.tenants = new WeightedPicker(workload.tenants.map((t) => t.weight));
    this.kinds = new WeightedPicker(workload.mix.map((m) => m.weight));
  }

  /** A tenant index drawn by weight (closed loop, and open loop without per-tenant rates). */
  pickTenant(): number {
    return this.tenants.pick(this.tenantRng);
  }

  /** The requests of one open-loop arrival of `tenant`: the mix entry's `burst` (default one). */
  arrival(tenant: number): PlannedRequest[] {
    const mixIndex = this.kinds.pick(this.kindRng);
    const mix = this.workload.mix[mixIndex];
    if (mix === undefined) return [];
    if (mix.kind === 'embedding') {
      return Array.from({ length: mix.burst }, () => this.embedding(mix, tenant));
    }
    if (mix.burst === 1) return [this.chat(mix, mixIndex, tenant)];
    return Array.from({ length: mix.burst }, () => this.chat(mix, mixIndex, tenant));
  }

  /** One request for a closed-loop sender (embedding bursts do not apply). */
  next(): PlannedRequest {
    const tenant = this.pickTenant();
    const mixIndex = this.kinds.pick(this.kindRng);
    const mix = this.workload.mix[mixIndex] as ChatMix | EmbeddingMix;
    return mix.kind === 'embedding' ? this.embedding(mix, tenant) : this.chat(mix, mixIndex, tenant);
  }

  /** Session counters since the source was created (warm-up included; see `statsSince`). */
  stats(): SourceStats {
    let overflows = 0;
    for (const p of this.pools.values()) overflows += p.overflows;
    return { sessionsStarted: this.sessionsStarted, sessionOverflows: overflows };
  }

  private headers(tenant: number, session: string | null): Record<string, string> {
    const h: Record<string, string> = { 'content-type': 'application/json' };
    const key = this.workload.tenants[tenant]?.apiKey ?? null;
    if (key !== null) h['authorization'] = `Bearer ${key}`;
    if (session !== null) h['x-session-id'] = session;
    return h;
  }

  private systemPrompt(mix: ChatMix, mixIndex: number, which: number): string | null {
    if (mix.systemPromptTokens === 0) return null;
    const id = `${mixIndex}/${which}`;
    let text = this.systemPrompts.get(id);
    if (text === undefined) {
      text = fillerText(mix.systemPromptTokens, SeededRandom.fromText(`${this.seed}/system/${id}`));
      this.systemPrompts.set(id, text);
    }
    return text;
  }

  private newSession(mix: ChatMix, mixIndex: number, tenant: number): ChatSession {
    const name = this.workload.tenants[tenant]?.name ?? String(tenant);
    const n = this.sessionsStarted++;
    const system = this.systemPrompt(mix, mixIndex, this.sessionRng.nextInt(mix.systemPrompts));
    return new ChatSession(`${name}-m${mixIndex}-s${n}`, system, sampleLength(mix.turns, this.lengthRng));
  }

  /** The session for the next turn: from the tenant's pool, or a fresh one when every session has one turn. */
  private session(mix: ChatMix, mixIndex: number, tenant: number): ChatSession {
    if (mix.turns.kind === 'fixed' && mix.turns.value === 1) return this.newSession(mix, mixIndex, tenant);
    const id = `${mixIndex}/${tenant}`;
    let pool = this.pools.get(id);
    if (pool === undefined) {
      pool = new SessionPool(
        this.workload.sessions,
        () => this.newSession(mix, mixIndex, tenant),
        this.workload.sessionZipf,
      );
      this.pools.set(id, pool);
    }
    // Half the context for the conversation so far leaves room for the next turn and its answer.
    const limitChars = (this.maxModelLen / 2) * CHARS_PER_TOKEN;
    return pool.take(this.sessionRng, (s) => s.historyChars + (s.system?.length ?? 0) < limitChars);
  }

  private chatBody(mix: ChatMix, messages: ChatMessage[], promptChars: number): string {
    const room = Math.max(
      1,
      this.maxModelLen - Math.ceil(promptChars / CHARS_PER_TOKEN) - 8 * messages.length,
    );
    const maxTokens = Math.min(room, sampleLength(mix.outputTokens, this.lengthRng));
    const body: Record<string, unknown> = { model: this.workload.model, messages, max_tokens: maxTokens };
    if (mix.stream) {
      body['stream'] = true;
      body['stream_options'] = { include_usage: true };
    }
    return JSON.stringify(body);
  }

  /**
   * A request of a `repeat` mix: prompt i (Zipf-popular, i = 0 the most) with its own user text and
   * max_tokens, both drawn once from a generator seeded by the prompt, so every run sends the same
   * bodies in the same order.
   */
  private repeatedChat(mix: ChatMix, mixIndex: number, tenant: number): PlannedRequest {
    let picker = this.repeatPickers.get(mixIndex);
    if (picker === undefined) {
      const weights = Array.from({ length: mix.repeatDistinct }, (_, i) => 1 / (i + 1) ** mix.repeatZipf);
      picker = new WeightedPicker(weights);
      this.repeatPickers.set(mixIndex, picker);
    }
    const i = picker.pick(this.sessionRng);
    const id = `${mixIndex}/${i}`;
    let body = this.repeated.get(id);
    if (body === undefined) {
      const rng = SeededRandom.fromText(`${this.seed}/repeat/${id}`);
      const userTokens = Math.min(sampleLength(mix.userTokens, rng), Math.floor(this.maxModelLen / 4));
      const user = `${i}: ${fillerText(userTokens, rng)}`;
      const maxTokens = Math.max(
        1,
        Math.min(sampleLength(mix.outputTokens, rng), this.maxModelLen - userTokens - 16),
      );
      const b: Record<string, unknown> = {
        model: this.workload.model,
        messages: [{ role: 'user', content: user }],
        max_tokens: maxTokens,
        temperature: 0,
      };
      if (mix.stream) b['stream'] = true;
      body = JSON.stringify(b);
      this.repeated.set(id, body);
    }
    return {
      kind: RequestKind.chat,
      tenant,
      path: '/v1/chat/completions',
      headers: this.headers(tenant, null),
      body,
      stream: mix.stream,
      session: null,
    };
  }

  private chat(mix: ChatMix, mixIndex: number, tenant: number): PlannedRequest {
    if (mix.repeatDistinct > 0) return this.repeatedChat(mix, mixIndex, tenant);
    const userTokens = Math.min(
      sampleLength(mix.userTokens, this.lengthRng),
      Math.floor(this.maxModelLen / 4),
    );
    const user = fillerText(userTokens, this.textRng);
    if (mix.hotShare > 0 && this.kindRng.nextFloat() < mix.hotShare) {
      const system = this.systemPrompt(mix, mixIndex, 0);
      const messages: ChatMessage[] = system === null ? [] : [{ role: 'system', content: system }];
      messages.push({ role: 'user', content: user });
      return {
        kind: RequestKind.hotKey,
        tenant,
        path: '/v1/chat/completions',
        headers: this.headers(tenant, mix.hotKey),
        body: this.chatBody(mix, messages, (system?.length ?? 0) + user.length),
        stream: mix.stream,
        session: null,
      };
    }
    const session = this.session(mix, mixIndex, tenant);
    const messages = session.messagesWith(user);
    return {
      kind: RequestKind.chat,
      tenant,
      path: '/v1/chat/completions',
      headers: this.headers(tenant, session.id),
      body: this.chatBody(mix, messages, session.historyChars + (session.system?.length ?? 0) + user.length),
      stream: mix.stream,
      session: session.startTurn(user),
    };
  }

  private embedding(mix: EmbeddingMix, tenant: number): PlannedRequest {
    const inputs = Array.from({ length: mix.items }, () =>
      fillerText(sampleLength(mix.inputTokens, this.lengthRng), this.textRng),
    );
    return {
      kind: RequestKind.embedding,
      tenant,
      path: '/v1/embeddings',
      headers: this.headers(tenant, null),
      body: JSON.stringify({
        model: this.workload.embeddingModel,
        input: mix.items === 1 ? inputs[0] : inputs,
      }),
      stream: false,
      session: null,
    };
  }
}
