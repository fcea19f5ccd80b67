/**
 * Node metrics scraping: the vLLM gauge parser on hand-written pages, the saturation rule, and live
 * scrapes of simulated nodes: idle values, saturation while requests queue on a one-slot node and
 * its clearing when they go, and a failed scrape that clears values without ejecting the node.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request, type ClientRequest } from 'node:http';
import {
  HealthEventKind,
  resolveHealthOptions,
  type PoolHealthOptions,
} from '../../proxy/health/health-options.js';
import { saturationReason } from '../../proxy/health/metrics-scraper.js';
import { PoolHealth } from '../../proxy/health/pool-health.js';
import { parseVllmLoad } from '../../proxy/health/vllm-metrics.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { loadSimProfile } from '../../loadtest/sim/profile-loader.js';
import { closeNodes, EventLog, liveNode, startCountingServer, waitFor } from './health-test-kit.js';

describe('vLLM metrics parser', () => {
  it('reads running, waiting and KV usage, ignoring comments and other metrics', () => {
    const page = [
      '# HELP vllm:num_requests_running Number of requests in model execution batches.',
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{model_name="m"} 7',
      'vllm:num_requests_waiting{model_name="m"} 3',
      'vllm:gpu_cache_usage_perc{model_name="m"} 0.42',
      'vllm:num_requests_waiting_by_reason{reason="capacity"} 99',
      'vllm:prompt_tokens_total{model_name="m"} 12345',
      'process_cpu_seconds_total 1.5',
    ].join('\n');
    assert.deepEqual(parseVllmLoad(page), { running: 7, waiting: 3, kvUsage: 0.42 });
  });

  it('sums running and waiting over series and takes the highest KV usage', () => {
    const page = [
      'vllm:num_requests_running{model_name="a"} 2',
      'vllm:num_requests_running{model_name="b"} 5',
      'vllm:num_requests_waiting{model_name="a"} 1',
      'vllm:num_requests_waiting{model_name="b"} 4',
      'vllm:gpu_cache_usage_perc{model_name="a"} 0.3',
      'vllm:gpu_cache_usage_perc{model_name="b"} 0.9',
    ].join('\n');
    assert.deepEqual(parseVllmLoad(page), { running: 7, waiting: 5, kvUsage: 0.9 });
  });

  it('handles label values with braces, quotes and spaces, timestamps, and no labels', () => {
    const page = [
      'vllm:num_requests_running{model_name="we}ird \\"name\\" {x}",engine="0"} 4 1712345678000',
      'vllm:num_requests_waiting 2.0',
      'vllm:kv_cache_usage_perc{model_name="m"}\t0.25',
    ].join('\n');
    assert.deepEqual(parseVllmLoad(page), { running: 4, waiting: 2, kvUsage: 0.25 });
  });

  it('reports -1 for missing gauges and skips unreadable or non-finite samples', () => {
    const page = [
      'vllm:num_requests_running{model_name="m"} NaN',
      'vllm:num_requests_waiting{model_name="m"} +Inf',
      'vllm:gpu_cache_usage_perc{model_name="m" 0.5',
      'vllm:num_requests_waiting{model_name="m"}',
    ].join('\n');
    assert.deepEqual(parseVllmLoad(page), { running: -1, waiting: -1, kvUsage: -1 });
    assert.deepEqual(parseVllmLoad(''), { running: -1, waiting: -1, kvUsage: -1 });
  });
});

describe('saturation rule', () => {
  const opts = (maxWaiting: number, maxKvUsage: number) =>
    resolveHealthOptions({ scrape: { maxWaiting, maxKvUsage } }).scrape!;

  it('saturates at the waiting threshold, not below it', () => {
    assert.equal(saturationReason({ running: 8, waiting: 3, kvUsage: 0.1 }, opts(4, 0)), null);
    assert.match(
      saturationReason({ running: 8, waiting: 4, kvUsage: 0.1 }, opts(4, 0)) ?? '',
      /4 requests waiting/,
    );
  });

  it('saturates at the KV-usage threshold, not below it', () => {
    assert.equal(saturationReason({ running: 1, waiting: 0, kvUsage: 0.89 }, opts(0, 0.9)), null);
    assert.match(
      saturationReason({ running: 1, waiting: 0, kvUsage: 0.9 }, opts(0, 0.9)) ?? '',
      /KV cache 90%/,
    );
  });

  it('never saturates with both thresholds at 0, or on a gauge the page lacks', () => {
    assert.equal(saturationReason({ running: 500, waiting: 500, kvUsage: 1 }, opts(0, 0)), null);
    assert.equal(saturationReason({ running: -1, waiting: -1, kvUsage: -1 }, opts(1, 0.5)), null);
  });
});

describe('live metrics scraping', () => {
  let fleet: SimFleet;
  let oneSlot: SimFleet;
  const healths: PoolHealth[] = [];
  const requests: ClientRequest[] = [];

  function start(nodes: UpstreamNode[], options: PoolHealthOptions): PoolHealth {
    const h = new PoolHealth('scraped', options);
    healths.push(h);
    h.update(nodes, options);
    return h;
  }

  /** A streamed chat request that holds a slot for about `tokens` × 50 ms; destroyed in afterEach. */
  function holdSlot(url: string, tokens: number): void {
    const body = JSON.stringify({
      model: 'sim-chat',
      stream: true,
      max_tokens: tokens,
      messages: [{ role: 'user', content: 'hold a slot please' }],
    });
    const req = request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '50' },
    });
    req.on('response', (res) => res.resume());
    req.on('error', () => undefined);
    req.end(body);
    requests.push(req);
  }

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    oneSlot = await startSimFleet({
      nodes: 1,
      port: 0,
      profile: { ...loadSimProfile('fast'), max_running: 1 },
    });
  });

  afterEach(async () => {
    for (const h of healths.splice(0)) h.close();
    for (const r of requests.splice(0)) r.destroy();
    for (const n of [...fleet.nodes, ...oneSlot.nodes]) n.setFaults({ crash: false });
    await closeNodes();
  });

  after(async () => {
    await Promise.all([fleet?.close(), oneSlot?.close()]);
  });

  it('reads the vLLM gauges of an idle simulated node', async () => {
    const a = liveNode(fleet.urls[0]!);
    const h = start([a], { scrape: { intervalMs: 20 } });
    assert.equal(a.scrapedRunning, -1, 'nothing is known before the first scrape');
    await waitFor(() => a.scrapedRunning >= 0, 'the first scrape');
    assert.equal(a.scrapedWaiting, 0);
    assert.equal(a.scrapedKvUsage, 0);
    assert.equal(a.saturated, false);
    assert.equal(h.snapshot().nodes[0]?.scrape?.failedScrapes, 0);
  });

  it('marks a node saturated while requests wait behind its only slot and clears it when they go', async () => {
    const a = liveNode(oneSlot.urls[0]!);
    const log = new EventLog();
    start([a], { scrape: { intervalMs: 20, maxWaiting: 2 }, onEvent: log.onEvent });
    await waitFor(() => a.scrapedWaiting === 0, 'the first scrape');
    holdSlot(oneSlot.urls[0]!, 200);
    holdSlot(oneSlot.urls[0]!, 200);
    await waitFor(() => a.scrapedRunning === 1 && a.scrapedWaiting === 1, 'one running, one waiting');
    assert.equal(a.saturated, false, 'one waiting is below maxWaiting 2');
    holdSlot(oneSlot.urls[0]!, 200);
    await waitFor(() => a.saturated, 'saturation');
    assert.equal(a.scrapedWaiting, 2);
    assert.equal(a.available, true, 'saturation is not ejection');
    for (const r of requests.splice(0)) r.destroy();
    await waitFor(() => !a.saturated, 'saturation to clear');
    await waitFor(() => a.scrapedRunning === 0 && a.scrapedWaiting === 0, 'the node to drain');
    assert.deepEqual(
      log.events.map((e) => e.kind),
      [HealthEventKind.saturated, HealthEventKind.unsaturated],
    );
  });

  it('clears gauges and saturation when a scrape fails, and never ejects for it', async () => {
    const a = liveNode(oneSlot.urls[0]!);
    const b = liveNode(fleet.urls[1]!);
    const h = start([a, b], { scrape: { intervalMs: 20, maxWaiting: 1 } });
    holdSlot(oneSlot.urls[0]!, 200);
    holdSlot(oneSlot.urls[0]!, 200);
    await waitFor(() => a.saturated, 'saturation');
    const failedBefore = h.snapshot().nodes[0]?.scrape?.failedScrapes ?? 0;
    oneSlot.nodes[0]!.setFaults({ crash: true });
    await waitFor(
      () => (h.snapshot().nodes[0]?.scrape?.failedScrapes ?? 0) > failedBefore,
      'a failed scrape',
    );
    assert.equal(a.scrapedRunning, -1);
    assert.equal(a.scrapedWaiting, -1);
    assert.equal(a.scrapedKvUsage, -1);
    assert.equal(a.saturated, false);
    assert.equal(a.available, true);
    assert.ok(h.snapshot().nodes[0]?.scrape?.lastError);
  });

  it('counts a page without vLLM gauges as a failed scrape', async () => {
    const server = await startCountingServer((_req, res) => res.end('up 1\n'));
    try {
      const a = liveNode(server.url);
      const h = start([a], { scrape: { intervalMs: 20 } });
      await waitFor(() => (h.snapshot().nodes[0]?.scrape?.failedScrapes ?? 0) >= 1, 'a failed scrape');
      assert.match(h.snapshot().nodes[0]?.scrape?.lastError ?? '', /no vLLM load gauges/);
      assert.equal(a.scrapedRunning, -1);
    } finally {
      await server.close();
    }
  });
});
