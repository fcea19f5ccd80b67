/**
 * The durable-jobs crash run: a Sluice child process with the batch API on a SQLite file, an
 * N-item embeddings batch uploaded and created over HTTP, `kill -9` of the child part-way, a
 * restart on the same file, and a check of the output file: every item present exactly once, in
 * input order, each result derived from its own input. Drives only public endpoints; knows
 * nothing of Sluice's internals.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimFleet } from '../sim/fleet.js';
import { expectedEmbedding } from '../sim/outputs.js';
import { freePort } from '../env/free-port.js';
import { startSluiceChild, type SluiceChild } from '../env/sluice-process.js';

/** Options of `runJobsCrash`. */
export interface CrashRunOptions {
  /** Items in the batch. Default 10,000. */
  items?: number;
  /** Share of results recorded before the kill, 0..1. Default 0.3. */
  killAt?: number;
  /** Simulated nodes. Default 2. */
  nodes?: number;
  /** Job items executing at once in Sluice. Default 64. */
  concurrency?: number;
  /** Lease on a claimed item, ms: how long items the killed process held wait before running again. Default 2000. */
  leaseMs?: number;
  /** Progress lines. Default none. */
  log?: (line: string) => void;
}

/** What the run saw. */
export interface CrashRunReport {
  items: number;
  /** Results recorded when the child was killed. */
  completedAtKill: number;
  /** Item executions the nodes served in total (above `items`: items run again after the crash). */
  executions: number;
  /** Lines of the output file. */
  outputLines: number;
  /** Output ids in input order, each once. */
  inOrder: boolean;
  /** No custom_id twice and none missing. */
  exactlyOnce: boolean;
  /** Every embedding equals the one derived from its own input. */
  resultsMatchInputs: boolean;
  /** Upload + create, ms. */
  createMs: number;
  /** From restart to `completed`, ms. */
  recoveryMs: number;
  /** Items per second over the whole run (both processes). */
  itemsPerSecond: number;
  /** All checks passed. */
  ok: boolean;
}

const DIM = 64; // embedding_dim of the `fast` profile

interface BatchView {
  id: string;
  status: string;
  output_file_id: string | null;
  request_counts: { total: number; completed: number; failed: number };
}

function jsonl(n: number): string {
  const parts: string[] = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    parts[i] = JSON.stringify({
      custom_id: `item-${i}`,
      method: 'POST',
      url: '/v1/embeddings',
      body: { model: 'sim-embed', input: `crash run ${i}` },
    });
  }
  return parts.join('\n') + '\n';
}

async function call<T>(url: string, init?: RequestInit): Promise<T> {
  const r = await fetch(url, init);
  const text = await r.text();
  if (!r.ok) throw new Error(`${init?.method ?? 'GET'} ${url}: HTTP ${r.status} ${text.slice(0, 300)}`);
  return JSON.parse(text) as T;
}

async function poll(url: string, until: (b: BatchView) => boolean, timeoutMs: number): Promise<BatchView> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const b = await call<BatchView>(url);
    if (until(b)) return b;
    if (performance.now() > deadline)
      throw new Error(`batch did not reach the expected state within ${timeoutMs} ms (${JSON.stringify(b)})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Runs the crash scenario end to end; rejects only when the setup itself fails. */
export async function runJobsCrash(opts: CrashRunOptions = {}): Promise<CrashRunReport> {
  const items = opts.items ?? 10_000;
  const killAt = opts.killAt ?? 0.3;
  const log = opts.log ?? ((): void => {});
  const dir = await mkdtemp(join(tmpdir(), 'sluice-jobs-crash-'));
  const fleet = await startSimFleet({ nodes: opts.nodes ?? 2, port: 0, profile: 'fast' });
  const [port, adminPort] = [await freePort(), await freePort()];
  const config = `listeners:
  - name: public
    address: 127.0.0.1
    port: ${port}
admin:
  address: 127.0.0.1
  port: ${adminPort}
pools:
  - name: gpu
    nodes:
${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}
routes:
  - name: embeddings
    match: { path: /v1/embeddings, methods: [POST] }
    pool: gpu
batch_api:
  jobs:
    path: ${JSON.stringify(join(dir, 'jobs.db'))}
    concurrency: ${opts.concurrency ?? 64}
    lease_ms: ${opts.leaseMs ?? 2000}
    poll_ms: 50
`;
  let child: SluiceChild | null = null;
  try {
    child = await startSluiceChild(config, 'public');
    const base = child.url;
    const t0 = performance.now();
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([jsonl(items)]), 'crash.jsonl');
    const file = await call<{ id: string }>(`${base}/v1/files`, { method: 'POST', body: form });
    const batch = await call<BatchView>(`${base}/v1/batches`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
    });
    const createMs = performance.now() - t0;
    log(`created ${batch.id} with ${items} items in ${createMs.toFixed(0)} ms`);
    const batchUrl = `${base}/v1/batches/${batch.id}`;
    const atKill = await poll(batchUrl, (b) => b.request_counts.completed >= items * killAt, 600_000);
    process.kill(child.pid!, 'SIGKILL');
    await child.stop();
    child = null;
    log(`killed with ${atKill.request_counts.completed}/${items} results recorded`);
    const t1 = performance.now();
    child = await startSluiceChild(config, 'public');
    const done = await poll(`${child.url}/v1/batches/${batch.id}`, (b) => b.status === 'completed', 600_000);
    const recoveryMs = performance.now() - t1;
    const totalMs = performance.now() - t0;
    log(`completed ${recoveryMs.toFixed(0)} ms after the restart`);
    const r = await fetch(`${child.url}/v1/files/${done.output_file_id ?? ''}/content`);
    const lines = (await r.text()).split('\n').filter((l) => l !== '');
    let inOrder = lines.length === items;
    let resultsMatchInputs = true;
    const seen = new Set<string>();
    for (let i = 0; i < lines.length; i++) {
      const line = JSON.parse(lines[i]!) as {
        custom_id: string;
        response: { body: { data: { embedding: number[] }[] } } | null;
      };
      if (line.custom_id !== `item-${i}`) inOrder = false;
      seen.add(line.custom_id);
      const got = line.response?.body.data[0]?.embedding;
      const want = expectedEmbedding(`crash run ${i}`, DIM);
      if (got === undefined || got.length !== want.length || got.some((v, k) => v !== want[k])) {
        resultsMatchInputs = false;
      }
    }
    const exactlyOnce = seen.size === items && lines.length === items;
    const executions = fleet.nodes.reduce((n, node) => n + node.stats().served, 0);
    const report: CrashRunReport = {
      items,
      completedAtKill: atKill.request_counts.completed,
      executions,
      outputLines: lines.length,
      inOrder,
      exactlyOnce,
      resultsMatchInputs,
      createMs: Math.round(createMs),
      recoveryMs: Math.round(recoveryMs),
      itemsPerSecond: Math.round((items / totalMs) * 1000),
      ok: inOrder && exactlyOnce && resultsMatchInputs && done.request_counts.completed === items,
    };
    return report;
  } finally {
    await child?.stop();
    await fleet.close();
    await rm(dir, { recursive: true, force: true });
  }
}
