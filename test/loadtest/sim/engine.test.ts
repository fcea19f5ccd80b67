/**
 * The engine without HTTP: FIFO admission into a fixed number of slots, KV-capacity admission,
 * prefix-cache hits on whole leading blocks only, chunked prefill, cancellation and reset.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SimEngine } from '../../../loadtest/sim/engine.js';
import { blockKeys } from '../../../loadtest/sim/prefix-cache.js';
import { estimateTokens } from '../../../loadtest/sim/outputs.js';
import type { JobSink, SimJob } from '../../../loadtest/sim/sim-job.js';
import { fastProfile, pollUntil } from './sim-test-helpers.js';

/** A sink that records events and resolves when a job completes. */
class Recorder implements JobSink {
  readonly events: string[] = [];
  private waiters = new Map<SimJob, () => void>();
  constructor(private readonly names: Map<SimJob, string>) {}
  onToken(job: SimJob, index: number): void {
    this.events.push(`${this.names.get(job) ?? '?'}:${index}`);
  }
  onDone(job: SimJob): void {
    this.events.push(`${this.names.get(job) ?? '?'}:done`);
    this.waiters.get(job)?.();
  }
  onAbort(job: SimJob): void {
    this.events.push(`${this.names.get(job) ?? '?'}:abort`);
    this.waiters.get(job)?.();
  }
  finished(job: SimJob): Promise<void> {
    return new Promise((resolve) => this.waiters.set(job, resolve));
  }
}

function spec(text: string, outputTokens: number, blockTokens = 16) {
  return {
    promptTokens: estimateTokens(text),
    outputTokens,
    tokenGapMs: 0,
    keys: blockKeys(text, blockTokens),
    promptBlocks: Math.floor(text.length / (blockTokens * 4)),
  };
}

describe('SimEngine', () => {
  it('admits in FIFO order into max_running slots and never runs more', async () => {
    const engine = new SimEngine(fastProfile({ max_running: 2 }), () => 1);
    const names = new Map<SimJob, string>();
    const rec = new Recorder(names);
    const jobs = ['a', 'b', 'c', 'd'].map((n) => {
      const job = engine.submitGenerate(spec(`prompt ${n}`, 3), rec);
      names.set(job, n);
      return job;
    });
    let maxRunning = 0;
    const probe = setInterval(() => (maxRunning = Math.max(maxRunning, engine.stats().running)), 0);
    await Promise.all(jobs.map((j) => rec.finished(j)));
    clearInterval(probe);
    assert.ok(maxRunning <= 2);
    const doneOrder = rec.events.filter((e) => e.endsWith(':done'));
    assert.deepEqual(doneOrder, ['a:done', 'b:done', 'c:done', 'd:done']);
    assert.ok(rec.events.indexOf('c:0') > rec.events.indexOf('a:done'), 'c must wait for a slot');
    assert.equal(engine.stats().completed, 4);
  });

  it('holds a request back while running sequences would exceed the KV capacity', async () => {
    const engine = new SimEngine(fastProfile({ kv_capacity_tokens: 100, max_running: 8 }), () => 1);
    const names = new Map<SimJob, string>();
    const rec = new Recorder(names);
    const text = 'x'.repeat(160); // 40 prompt tokens + 20 output = 60 reserved each
    const a = engine.submitGenerate(spec(text, 20), rec);
    const b = engine.submitGenerate(spec(`${text}y`, 20), rec);
    names.set(a, 'a').set(b, 'b');
    await Promise.all([rec.finished(a), rec.finished(b)]);
    assert.ok(rec.events.indexOf('b:0') > rec.events.indexOf('a:done'));
  });

  it('counts prefix-cache hits for whole leading blocks only', async () => {
    const engine = new SimEngine(fastProfile({ block_tokens: 16 }), () => 1);
    const rec = new Recorder(new Map());
    // 64 characters per block: the first 150 characters agree, so blocks 0 and 1 match, block 2 differs.
    const first = 'a'.repeat(200);
    const second = 'a'.repeat(150) + 'b'.repeat(50);
    await rec.finished(engine.submitGenerate(spec(first, 1), rec));
    const before = engine.stats();
    assert.equal(before.cacheHitTokens, 0);
    await rec.finished(engine.submitGenerate(spec(second, 1), rec));
    const after = engine.stats();
    assert.equal(after.cacheHitTokens, 32);
    assert.equal(after.cacheQueryTokens, 100);
  });

  it('always computes at least one prompt token, even when the whole prompt is cached', async () => {
    const engine = new SimEngine(fastProfile({ block_tokens: 16 }), () => 1);
    const rec = new Recorder(new Map());
    const text = 'z'.repeat(128); // exactly two blocks
    await rec.finished(engine.submitGenerate(spec(text, 1), rec));
    const job = engine.submitGenerate(spec(text, 1), rec);
    await rec.finished(job);
    assert.equal(job.cachedTokens, 16);
    assert.equal(engine.stats().cacheHitTokens, 16);
  });

  it('spreads a long prefill over several steps under max_batched_tokens', async () => {
    // 4,000 prompt tokens, 1,000 per step at 100k tok/s: four steps of 1 + 10 ms each.
    const profile = fastProfile({ max_batched_tokens: 1000, prefill_tokens_per_s: 100_000 });
    const engine = new SimEngine(profile, () => 1);
    const rec = new Recorder(new Map());
    const job = engine.submitGenerate(spec('p'.repeat(16_000), 1), rec);
    await rec.finished(job);
    const ttft = job.firstTokenAt - job.admittedAt;
    assert.ok(ttft >= 40, `four prefill steps should take ~44 ms, took ${ttft.toFixed(1)} ms`);
  });

  it('runs queued embeddings back to back: timer lateness does not add up across a queue', async () => {
    // 40 embeddings of 4.3 ms model time on one slot: 172 ms of model time in a row. A timer fires
    // late (up to a millisecond or more); the next embedding starts at the model's end of the last.
    const engine = new SimEngine(
      fastProfile({ max_running: 1, embedding_fixed_ms: 4, embedding_per_item_ms: 0.3 }),
      () => 1,
    );
    const done: Promise<void>[] = [];
    const started = performance.now();
    const rec = new Recorder(new Map());
    for (let i = 0; i < 40; i++) done.push(rec.finished(engine.submitEmbedding(1, 10, rec)));
    await Promise.all(done);
    const ms = performance.now() - started;
    assert.ok(ms >= 172 - 1, `${ms.toFixed(1)} ms for 172 ms of model time`);
    // Before, each embedding ended on its own timer, rounded to whole milliseconds (4.3 ran 4: 40
    // took 166–168 ms on an idle machine) and then waited for a wake-up of the step loop (on a busy
    // one, 20–25 % more than the model). A late last timer is allowed for.
    assert.ok(ms < 172 + 30, `${ms.toFixed(1)} ms for 172 ms of model time`);
  });

  it('forgets a cancelled waiting job and frees a cancelled running job’s slot', async () => {
    const engine = new SimEngine(fastProfile({ max_running: 1 }), () => 1);
    const names = new Map<SimJob, string>();
    const rec = new Recorder(names);
    const a = engine.submitGenerate({ ...spec('a', 1000), tokenGapMs: 5 }, rec);
    const b = engine.submitGenerate(spec('b', 2), rec);
    const c = engine.submitGenerate(spec('c', 2), rec);
    names.set(a, 'a').set(b, 'b').set(c, 'c');
    assert.equal(engine.stats().waiting, 3);
    engine.cancel(b);
    assert.equal(engine.stats().waiting, 2);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(engine.stats().running, 1);
    engine.cancel(a);
    await rec.finished(c);
    assert.ok(!rec.events.some((e) => e.startsWith('b:')));
    assert.equal(engine.stats().cancelled, 2);
    assert.equal(engine.stats().running, 0);
  });

  it('aborts every job and empties the cache on reset', async () => {
    const engine = new SimEngine(fastProfile({ max_running: 1 }), () => 1);
    const names = new Map<SimJob, string>();
    const rec = new Recorder(names);
    const a = engine.submitGenerate({ ...spec('q'.repeat(200), 100), tokenGapMs: 5 }, rec);
    const b = engine.submitGenerate(spec('b', 2), rec);
    names.set(a, 'a').set(b, 'b');
    await pollUntil('the first prompt to be cached', () => engine.stats().cachedTokens > 0);
    engine.reset();
    assert.deepEqual(
      rec.events.filter((e) => e.endsWith('abort')),
      ['a:abort', 'b:abort'],
    );
    const s = engine.stats();
    assert.equal(s.running, 0);
    assert.equal(s.waiting, 0);
    assert.equal(s.cachedTokens, 0);
    assert.equal(s.kvUsage, 0);
  });
});
