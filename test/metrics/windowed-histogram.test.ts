/**
 * The windowed histogram: values show in the window until their slice leaves it, and since start
 * forever, once each whatever the number of slices (one included); Prometheus buckets count every value once; a destroyed histogram takes records without
 * failing; recording allocates nothing.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LATENCY_US } from '../../proxy/metrics/hdr.js';
import { scratchHistogram, summarize, WindowedHistogram } from '../../proxy/metrics/windowed-histogram.js';

const SHAPE = { slices: 3, sliceMs: 10_000 };

function views(w: WindowedHistogram): { window: number; total: number; p50w: number } {
  const h = scratchHistogram(LATENCY_US);
  try {
    w.addWindowTo(h);
    const window = h.totalCount;
    const p50w = summarize(h, LATENCY_US).p50;
    h.reset();
    w.addTotalTo(h);
    return { window, total: h.totalCount, p50w };
  } finally {
    h.destroy();
  }
}

describe('windowed histogram', { timeout: 10_000 }, () => {
  it('keeps a value in the window for as many slices as the window has, and since start forever', () => {
    const w = new WindowedHistogram(LATENCY_US, [0.01, 0.1], SHAPE);
    w.record(5_000);
    assert.deepEqual(views(w).window, 1);
    w.rotate();
    w.rotate();
    assert.equal(views(w).window, 1, 'still inside the last 3 slices');
    w.rotate();
    const v = views(w);
    assert.equal(v.window, 0, 'left the window after 3 rotations');
    assert.equal(v.total, 1);
    w.destroy();
  });

  for (const slices of [1, 2, 3]) {
    it(`with ${slices} slice(s), counts each value once: in the window for ${slices} slice(s), since start forever`, () => {
      const w = new WindowedHistogram(LATENCY_US, [0.01], { slices, sliceMs: 1000 });
      // Values recorded in each slice, oldest first; the last entry is the current slice.
      const perSlice: number[] = [0];
      const check = (when: string): void => {
        const v = views(w);
        const inWindow = perSlice.slice(-slices).reduce((a, b) => a + b, 0);
        const total = perSlice.reduce((a, b) => a + b, 0);
        assert.equal(v.window, inWindow, `window count ${when}`);
        assert.equal(w.windowCount, inWindow, `windowCount ${when}`);
        assert.equal(v.total, total, `since-start count ${when}`);
        assert.equal(w.count, total, `Prometheus count ${when}`);
      };
      for (let step = 0; step < 12; step++) {
        // 0 to 4 values per slice, some slices empty (as with no traffic).
        const n = (step * 7) % 5;
        for (let i = 0; i < n; i++) w.record(1000 + step * 100 + i);
        perSlice[perSlice.length - 1]! += n;
        check(`after recording in slice ${step}`);
        w.rotate();
        perSlice.push(0);
        check(`after rotation ${step + 1}`);
      }
      // No traffic: the window empties after `slices` rotations, since start stays.
      for (let i = 0; i < slices; i++) {
        w.rotate();
        perSlice.push(0);
      }
      check('after a quiet window');
      assert.equal(views(w).window, 0);
      w.destroy();
    });
  }

  it('shows the recent values in the window percentiles, not the old ones', () => {
    const w = new WindowedHistogram(LATENCY_US, [], SHAPE);
    for (let i = 0; i < 100; i++) w.record(1_000_000); // 1 s, long ago
    for (let i = 0; i < 3; i++) w.rotate();
    for (let i = 0; i < 100; i++) w.record(20_000); // 20 ms, now
    const v = views(w);
    assert.equal(v.total, 200);
    assert.ok(Math.abs(v.p50w - 0.02) < 0.0002, `window p50 ${v.p50w}`);
    w.destroy();
  });

  it('counts each value in exactly one Prometheus bucket, at or below its bound', () => {
    const w = new WindowedHistogram(LATENCY_US, [0.01, 0.1], SHAPE);
    for (const us of [10_000, 10_001, 100_000, 5_000_000]) w.record(us);
    assert.deepEqual([...w.buckets], [1, 2, 1]);
    assert.equal(w.count, 4);
    assert.equal(w.sum, 10_000 + 10_001 + 100_000 + 5_000_000);
    w.destroy();
  });

  it('clamps values outside the range instead of failing', () => {
    const w = new WindowedHistogram(LATENCY_US, [], SHAPE);
    w.record(-5);
    w.record(1e15);
    assert.equal(views(w).total, 2);
    w.destroy();
  });

  it('takes records after being destroyed (a request that outlived a reload) without failing', () => {
    const w = new WindowedHistogram(LATENCY_US, [], SHAPE);
    w.destroy();
    w.record(1000);
    w.rotate();
    assert.equal(views(w).total, 0);
  });

  it('records without allocating', () => {
    const w = new WindowedHistogram(LATENCY_US, [0.001, 0.01, 0.1, 1], SHAPE);
    const run = (): number => {
      const before = process.memoryUsage().heapUsed;
      for (let i = 0; i < 200_000; i++) w.record(1000 + (i % 50_000));
      return process.memoryUsage().heapUsed - before;
    };
    // The first runs also pay for compiling the loop (optimised code and its feedback live on the
    // heap too); a record that allocated would grow the heap by megabytes in every run, so the
    // smallest growth over several runs is the one to judge.
    const grown = Math.min(run(), run(), run(), run(), run());
    assert.ok(grown < 256 * 1024, `heap grew at least ${grown} bytes over each 200,000 records`);
    w.destroy();
  });
});
