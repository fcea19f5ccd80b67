/**
 * response-cache: answers repeated deterministic requests (embeddings; chat and text completions
 * with temperature 0, one choice and no tools) from a stored complete answer, per tenant. In process
 * (bounded in bytes, TTL, LRU or cost-aware eviction, see cache-policy.ts) or in Redis through the
 * plugin key-value store (TTL; Redis's own memory policy evicts). A miss is copied as it streams to
 * the client (never held back) and stored when it ends; a streamed request is served from the
 * stored complete answer as SSE. Answers carry `x-sluice-cache: hit` or `miss`.
 */
import { definePlugin, type PluginRequest } from '../api.js';
import { cacheableKind, cacheKey, type CacheableKind } from './cache-key.js';
import { createAnswerStore, type CacheEntry } from './cache-policy.js';
import { answerFromStream, streamFromAnswer } from './sse-answer.js';

interface Options {
  store: 'memory' | 'redis';
  policy: 'cost-aware' | 'lru';
  max_bytes: number;
  max_entry_bytes: number;
  ttl_ms: number;
}

/** A miss being recorded. */
interface Miss {
  key: string;
  kind: CacheableKind;
  stream: boolean;
  /** Monotonic start, ms: the answer's cost is measured from here. */
  startMs: number;
  parts: Buffer[];
  bytes: number;
  /** False once the answer turned out not to be storable (status, size). */
  ok: boolean;
}

/** What the request asked for, to serve a hit in the right form. */
interface Wanted {
  kind: CacheableKind;
  stream: boolean;
  includeUsage: boolean;
}

export default definePlugin<Options>({
  name: 'response-cache',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: {
      store: {
        enum: ['memory', 'redis'],
        default: 'memory',
        description: 'redis needs plugin_store.store: redis.',
      },
      policy: {
        enum: ['cost-aware', 'lru'],
        default: 'cost-aware',
        description: 'Eviction policy of the memory store.',
      },
      max_bytes: { type: 'integer', minimum: 1024, default: 67108864 },
      max_entry_bytes: { type: 'integer', minimum: 1, default: 1048576 },
      ttl_ms: { type: 'integer', minimum: 1, default: 300000 },
    },
  },
  create(options, context) {
    const { name, kv, clock } = context;
    if (options.store === 'redis' && kv.kind !== 'redis')
      throw new Error('store: redis needs the plugin store in Redis (plugin_store.store: redis)');
    const mem = options.store === 'memory' ? createAnswerStore(options.policy, options.max_bytes) : null;
    const m = context.metrics;
    const hits = m.counter('sluice_plugin_response_cache_hits_total', 'Requests answered from the cache.', [
      'plugin',
    ]);
    const misses = m.counter(
      'sluice_plugin_response_cache_misses_total',
      'Cacheable requests sent to a node.',
      ['plugin'],
    );
    const stored = m.counter('sluice_plugin_response_cache_stored_total', 'Answers stored.', ['plugin']);
    const saved = m.counter(
      'sluice_plugin_response_cache_saved_seconds_total',
      'Node time the hits saved: the stored compute time of each answer served from the cache.',
      ['plugin'],
    );
    const evictions = m.counter(
      'sluice_plugin_response_cache_evictions_total',
      'Entries dropped to make room.',
      ['plugin'],
    );
    const storeErrors = m.counter(
      'sluice_plugin_response_cache_store_errors_total',
      'Redis lookups or writes that failed (served as misses).',
      ['plugin'],
    );
    const bytesGauge = m.gauge('sluice_plugin_response_cache_bytes', 'Bytes held by the memory store.', [
      'plugin',
    ]);
    const entriesGauge = m.gauge(
      'sluice_plugin_response_cache_entries',
      'Entries held by the memory store.',
      ['plugin'],
    );
    let evicted = 0;

    const serve = (req: PluginRequest, e: CacheEntry, w: Wanted): void => {
      hits.inc(1, name);
      saved.inc(e.costMs / 1000, name);
      if (w.stream) {
        req.respond(200, streamFromAnswer(e.body, w.kind, w.includeUsage), {
          'content-type': 'text/event-stream',
          'cache-control': 'no-cache',
          'x-sluice-cache': 'hit',
        });
      } else {
        req.respond(200, e.body, { 'content-type': 'application/json', 'x-sluice-cache': 'hit' });
      }
    };

    // An answer without usage (a stream folded without its usage event) serves no request that
    // needs usage: a plain answer always carries it in OpenAI's API, and a stream may ask for it.
    // Such a request goes to the node, and its answer replaces the entry.
    const servable = (e: CacheEntry, w: Wanted): boolean =>
      e.noUsage !== true || (w.stream && !w.includeUsage);

    const miss = (req: PluginRequest, key: string, w: Wanted): void => {
      misses.inc(1, name);
      const state: Miss = {
        key,
        kind: w.kind,
        stream: w.stream,
        startMs: clock.nowMs(),
        parts: [],
        bytes: 0,
        ok: true,
      };
      req.state = state;
    };

    const save = (s: Miss): void => {
      const text = Buffer.concat(s.parts).toString('utf8');
      let body = text;
      let noUsage = false;
      if (s.stream) {
        const folded = answerFromStream(text, s.kind);
        if (folded === null) return;
        body = folded.body;
        noUsage = !folded.usage;
      }
      const costMs = clock.nowMs() - s.startMs;
      if (mem !== null) {
        if (!mem.set(s.key, { body, costMs, expiresAt: clock.wallMs() + options.ttl_ms, noUsage })) return;
        stored.inc(1, name);
        if (mem.evictions > evicted) {
          evictions.inc(mem.evictions - evicted, name);
          evicted = mem.evictions;
        }
        bytesGauge.set(mem.bytes, name);
        entriesGauge.set(mem.size, name);
        return;
      }
      kv.set(
        s.key,
        JSON.stringify(noUsage ? { b: body, c: costMs, u: 0 } : { b: body, c: costMs }),
        options.ttl_ms,
      ).then(
        () => stored.inc(1, name),
        () => storeErrors.inc(1, name),
      );
    };

    return {
      onRoute(req) {
        if (req.method !== 'POST') return;
        const body = req.json();
        const kind = cacheableKind(req.path, body);
        if (kind === null) return;
        const b = body as { stream?: unknown; stream_options?: { include_usage?: unknown } };
        const w: Wanted = {
          kind,
          stream: b.stream === true,
          includeUsage: b.stream_options?.include_usage === true,
        };
        const key = cacheKey(req.tenant, req.route ?? '', req.path, body, req.tags['public_model']);
        // The client's Cache-Control (RFC 9111 §5.2.1): no-store, neither served nor stored;
        // no-cache, or max-age=0 (no stored answer is fresh enough), computed again by the node
        // (and the new answer stored).
        const cc = req.header('cache-control');
        if (cc !== undefined) {
          const directives = cc.toLowerCase();
          if (/(^|[\s,])no-store([\s,]|$)/.test(directives)) return;
          if (
            /(^|[\s,])no-cache([\s,=]|$)/.test(directives) ||
            /(^|[\s,])max-age\s*=\s*"?0+"?\s*(,|$)/.test(directives)
          ) {
            miss(req, key, w);
            return;
          }
        }
        if (mem !== null) {
          const e = mem.get(key, clock.wallMs());
          if (e !== undefined && servable(e, w)) serve(req, e, w);
          else miss(req, key, w);
          return;
        }
        return kv.get(key).then(
          (v) => {
            const parsed = v === null ? null : (JSON.parse(v) as { b: string; c: number; u?: 0 });
            const e: CacheEntry | null =
              parsed === null
                ? null
                : { body: parsed.b, costMs: parsed.c, expiresAt: Infinity, noUsage: parsed.u === 0 };
            if (e !== null && servable(e, w)) serve(req, e, w);
            else miss(req, key, w);
          },
          () => {
            storeErrors.inc(1, name);
            miss(req, key, w);
          },
        );
      },
      onResponseHead(req) {
        const s = req.state as Miss | undefined;
        if (s === undefined) return;
        if (req.status !== 200) {
          s.ok = false;
          return;
        }
        req.setResponseHeader('x-sluice-cache', 'miss');
        // The node's Cache-Control (RFC 9111 §5.2.2): a shared cache stores no answer marked
        // no-store or private (with or without field names). no-cache is not looked at: SSE
        // servers send it on every stream.
        const cc = req.responseHeader('cache-control');
        if (cc !== undefined && /(^|[\s,])(no-store|private)([\s,=]|$)/i.test(cc)) s.ok = false;
      },
      onResponseChunk(req, chunk) {
        const s = req.state as Miss | undefined;
        if (s === undefined || !s.ok) return;
        if (chunk === null) {
          save(s);
          return;
        }
        if (s.bytes + chunk.length > options.max_entry_bytes) {
          s.ok = false;
          s.parts = [];
          return;
        }
        s.parts.push(chunk);
        s.bytes += chunk.length;
      },
    };
  },
});
