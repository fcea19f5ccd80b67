/**
 * Scrapes one node's Prometheus `/metrics` (vLLM names) on a timer and writes the load gauges and
 * the saturation flag onto the node. A failed scrape never takes a node out of rotation: it only
 * clears what the scraper wrote (gauges -1, not saturated).
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { ResolvedScrape } from './health-options.js';
import type { ProbeClient } from './probe-client.js';
import { ProbeLoop } from './probe-loop.js';
import { parseVllmLoad, type VllmLoad } from './vllm-metrics.js';

/** Called when `node.saturated` changes, with the threshold crossed or the scrape error. */
export type SaturationChange = (saturated: boolean, reason: string) => void;

/** A 0..1 share as a percentage with one decimal. */
function percent(share: number): number {
  return Math.round(share * 1000) / 10;
}

/**
 * Why `load` means saturation under `options`, or null when it does not: waiting requests at or
 * above `maxWaiting`, or KV-cache usage at or above `maxKvUsage` (a threshold of 0 is not used; a
 * gauge the page lacks never saturates).
 */
export function saturationReason(load: VllmLoad, options: ResolvedScrape): string | null {
  if (options.maxWaiting > 0 && load.waiting >= options.maxWaiting) {
    return `${load.waiting} requests waiting (limit ${options.maxWaiting})`;
  }
  if (options.maxKvUsage > 0 && load.kvUsage >= options.maxKvUsage) {
    return `KV cache ${percent(load.kvUsage)}% used (limit ${percent(options.maxKvUsage)}%)`;
  }
  return null;
}

/** Scrapes one node. */
export class MetricsScraper {
  /** Scrapes completed since start. */
  scrapes = 0;
  /** Scrapes failed since start (transport, status, or a page without vLLM gauges). */
  failedScrapes = 0;
  /** Why the last failed scrape failed; null before any failure. */
  lastError: string | null = null;
  private options: ResolvedScrape;
  private readonly node: UpstreamNode;
  private readonly client: ProbeClient;
  private readonly onChange: SaturationChange;
  private readonly loop: ProbeLoop;

  constructor(node: UpstreamNode, options: ResolvedScrape, client: ProbeClient, onChange: SaturationChange) {
    this.node = node;
    this.options = options;
    this.client = client;
    this.onChange = onChange;
    // A tenth of the interval as jitter keeps many nodes' scrapes from lining up.
    this.loop = new ProbeLoop(
      () => this.scrape(),
      () => this.options.intervalMs * (1 + Math.random() / 10),
    );
  }

  /** Starts scraping; the first scrape runs within a tenth of the interval. */
  start(): void {
    this.loop.start((Math.random() * this.options.intervalMs) / 10);
  }

  /** Applies new options (from a reload) from the next scrape on. */
  reconfigure(options: ResolvedScrape): void {
    this.options = options;
  }

  /** Stops scraping and clears what it wrote: gauges back to -1, not saturated. */
  stop(): void {
    this.loop.stop();
    this.clear('scraping stopped');
  }

  private async scrape(): Promise<void> {
    const { path, timeoutMs, maxBodyBytes } = this.options;
    const r = await this.client.get(this.node.origin, path, timeoutMs, maxBodyBytes);
    if (!this.loop.active) return;
    this.scrapes++;
    if (r.error !== null || r.status < 200 || r.status >= 300) {
      this.fail(r.error ?? `HTTP ${r.status}`);
      return;
    }
    const load = parseVllmLoad(r.body);
    if (load.running < 0 && load.waiting < 0 && load.kvUsage < 0) {
      this.fail(`no vLLM load gauges on ${path}`);
      return;
    }
    const n = this.node;
    n.scrapedRunning = load.running;
    n.scrapedWaiting = load.waiting;
    n.scrapedKvUsage = load.kvUsage;
    // The waiting count includes this instance's own queued attempts; policies subtract these.
    n.timing.pendingAtScrape = n.timing.pendingCount;
    const reason = saturationReason(load, this.options);
    this.setSaturated(reason !== null, reason ?? 'below every saturation threshold');
  }

  private fail(reason: string): void {
    this.failedScrapes++;
    this.lastError = reason;
    this.clear(`scrape failed: ${reason}`);
  }

  private clear(reason: string): void {
    const n = this.node;
    n.scrapedRunning = -1;
    n.scrapedWaiting = -1;
    n.scrapedKvUsage = -1;
    this.setSaturated(false, reason);
  }

  private setSaturated(saturated: boolean, reason: string): void {
    if (this.node.saturated === saturated) return;
    this.node.saturated = saturated;
    this.onChange(saturated, reason);
  }
}
