/**
 * An embeddings answer goes out at its modelled time: the vectors and their JSON are built while
 * the modelled time runs, not after it (512 vectors of 768 dimensions and their 8 MB of JSON take
 * 100-400 ms of CPU). Wall-clock lateness is noisy on a shared machine, so the test also looks at
 * where the CPU time goes: into the modelled wait, not between its end and the response head.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startSimFleet } from '../../../loadtest/sim/fleet.js';
import { embeddingsBody } from '../../../loadtest/sim/openai-shapes.js';
import { embeddingVector, expectedEmbedding } from '../../../loadtest/sim/outputs.js';
import { fastProfile, postJson } from './sim-test-helpers.js';

const ITEMS = 512;
const DIM = 768;

/** CPU time this process has used (every thread), ms. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

describe('embeddings timing', { timeout: 30_000 }, () => {
  it('builds a large batch answer during its modelled time, not after it', async () => {
    const inputs = Array.from({ length: ITEMS }, (_, i) => `embedding timing input ${i}`);
    // What building the answer costs here (the work the node must overlap), wall and CPU.
    const t0 = performance.now();
    const c0 = cpuMs();
    const out = inputs.map((text) => Array.from(embeddingVector(text, DIM)));
    assert.ok(Buffer.from(JSON.stringify(embeddingsBody('e', out, 0))).length > 0);
    const buildCpuMs = cpuMs() - c0;
    const buildMs = performance.now() - t0;
    // The batch's modelled time, ms: well above what building its answer takes here and now.
    const modelMs = Math.max(400, Math.ceil(4 * buildMs));

    const profile = fastProfile({
      embedding_dim: DIM,
      embedding_fixed_ms: modelMs,
      embedding_per_item_ms: 0,
    });
    const fleet = await startSimFleet({ nodes: 1, profile });
    try {
      const url = fleet.urls[0] as string;
      // The process's first request pays for setting up the client; that is not the node's time.
      await (await postJson(`${url}/v1/embeddings`, { model: 'e', input: 'warm' })).arrayBuffer();
      const start = performance.now();
      // Halfway through the modelled time (the node and this client share the thread, so this
      // fires once a build at the start is done).
      const half = new Promise<{ at: number; cpu: number }>((resolve) =>
        setTimeout(() => resolve({ at: performance.now(), cpu: cpuMs() }), modelMs / 2),
      );
      const res = await postJson(`${url}/v1/embeddings`, { model: 'e', input: inputs });
      const head = { at: performance.now(), cpu: cpuMs() };
      const mid = await half;
      const body = (await res.json()) as { data: { index: number; embedding: number[] }[] };
      assert.equal(res.status, 200);
      assert.equal(body.data.length, ITEMS);
      assert.deepEqual(body.data[ITEMS - 1]?.embedding, expectedEmbedding(inputs[ITEMS - 1] as string, DIM));
      const headMs = head.at - start;
      assert.ok(headMs >= modelMs - 1, `answered after ${headMs.toFixed(1)} ms, before the model's end`);
      assert.ok(mid.at < head.at, 'the halfway mark came before the answer');
      const tailCpuMs = head.cpu - mid.cpu;
      assert.ok(
        tailCpuMs < buildCpuMs / 2,
        `${tailCpuMs.toFixed(1)} ms of CPU between halfway and the head (${(headMs - modelMs).toFixed(1)} ms ` +
          `after the model's end); building the answer takes ${buildCpuMs.toFixed(1)} ms of CPU`,
      );
    } finally {
      await fleet.close();
    }
  });
});
