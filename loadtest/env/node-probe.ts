/**
 * Reads the simulated nodes' own counters before and after a phase: requests served, slot-busy
 * time, prefix-cache lookups and hits. From an in-process fleet it calls `SimNode.stats()`; from
 * nodes in another process it scrapes their Prometheus `/metrics` (vLLM names plus `sluice_sim_*`).
 */

import type { SimNode } from '../sim/sim-node.js';
import { parsePromText, sumOf } from './prom-text.js';

/** One node's cumulative counters at one moment. */
export interface NodeSample {
  url: string;
  /** Inference responses completed with 200. */
  served: number;
  /** Sum over requests of time holding a slot, ms. */
  busySlotMs: number;
  /** Prompt tokens looked up in the prefix cache. */
  cacheQueryTokens: number;
  /** Of those, tokens found cached. */
  cacheHitTokens: number;
  /** Output tokens produced. */
  generationTokens: number;
  speedFactor: number;
  /** Sequence slots, or null when unknown (nodes read over /metrics without a known profile). */
  maxRunning: number | null;
  /** When the sample was taken, `performance.now()` ms. */
  at: number;
}

/** Takes samples of a set of nodes. */
export interface NodeProbe {
  /** Samples every node now. Nodes that cannot be read are left out. */
  sample(): Promise<NodeSample[]>;
}

/** A probe over nodes running in this process. */
export function inProcessProbe(nodes: readonly SimNode[]): NodeProbe {
  return {
    sample: () => {
      const at = performance.now();
      return Promise.resolve(
        nodes.map((n) => {
          const s = n.stats();
          return {
            url: n.url,
            served: s.served,
            busySlotMs: s.busySlotMs,
            cacheQueryTokens: s.cacheQueryTokens,
            cacheHitTokens: s.cacheHitTokens,
            generationTokens: s.generationTokens,
            speedFactor: n.speedFactor,
            maxRunning: n.profile.max_running,
            at,
          };
        }),
      );
    },
  };
}

async function scrape(
  url: string,
  maxRunning: number | null,
  failed: (url: string, why: string) => void,
): Promise<NodeSample | null> {
  try {
    const res = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2000) });
    if (res.status !== 200) {
      await res.arrayBuffer();
      failed(url, `answered ${res.status}`);
      return null;
    }
    const samples = parsePromText(await res.text());
    return {
      url,
      served: sumOf(samples, 'sluice_sim_requests_total', { outcome: '200' }),
      busySlotMs: sumOf(samples, 'sluice_sim_busy_slot_seconds_total') * 1000,
      cacheQueryTokens: sumOf(samples, 'vllm:prefix_cache_queries_total'),
      cacheHitTokens: sumOf(samples, 'vllm:prefix_cache_hits_total'),
      generationTokens: sumOf(samples, 'vllm:generation_tokens_total'),
      speedFactor: sumOf(samples, 'sluice_sim_speed_factor') || 1,
      maxRunning,
      at: performance.now(),
    };
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    failed(url, cause?.code ?? cause?.message ?? (e instanceof Error ? e.message : String(e)));
    return null;
  }
}

/**
 * A probe scraping `urls`' /metrics; `maxRunning` is the slot count when the profile is known.
 * `warn` hears once per URL that could not be read (its node is then left out of the report).
 */
export function metricsProbe(
  urls: readonly string[],
  maxRunning: number | null,
  warn: (line: string) => void = () => undefined,
): NodeProbe {
  const told = new Set<string>();
  const failed = (url: string, why: string): void => {
    if (told.has(url)) return;
    told.add(url);
    warn(`node_metrics ${url}: cannot read /metrics (${why}); this node is left out of the report`);
  };
  return {
    sample: async () =>
      (await Promise.all(urls.map((u) => scrape(u, maxRunning, failed)))).filter((s) => s !== null),
  };
}
