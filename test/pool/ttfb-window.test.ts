/**
 * The hedging window's percentile follows its first 64 samples one by one (a pool hedging after
 * `min_samples: 5` must not be stuck on its first sample until the 16th), then every 16 samples.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TtfbWindow } from '../../proxy/pool/ttfb-window.js';

describe('TtfbWindow', () => {
  it('recomputes at each of the first samples (past the default min_samples of 20)', () => {
    const w = new TtfbWindow(50);
    w.add(2000);
    assert.equal(w.value(), 2000);
    for (let i = 0; i < 4; i++) w.add(15);
    // Five samples, one slow: the median is the fast ones'.
    assert.equal(w.value(), 15);
  });

  it('keeps a cached value between recomputations once past the first samples', () => {
    const w = new TtfbWindow(95);
    for (let i = 0; i < 64; i++) w.add(10);
    assert.equal(w.value(), 10);
    for (let i = 0; i < 15; i++) w.add(100);
    assert.equal(w.value(), 10);
    w.add(100);
    assert.equal(w.value(), 100);
  });
});
