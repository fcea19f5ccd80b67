/** The decayed ratio behind the learned prefill rates: weights halve per half-life; bad samples are ignored. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DecayedRatio } from '../../proxy/balance/decayed-ratio.js';

describe('DecayedRatio', () => {
  it('is -1 before the first sample and y/x after it', () => {
    const r = new DecayedRatio();
    assert.equal(r.value(), -1);
    r.add(300, 1000, 5, 1000);
    assert.equal(r.value(), 0.3);
  });

  it('weighs samples of different sizes by their size at the same instant', () => {
    const r = new DecayedRatio();
    r.add(100, 1000, 0, 1000);
    r.add(900, 3000, 0, 1000);
    assert.equal(r.value(), 1000 / 4000);
  });

  it('halves the weight of older samples every half-life', () => {
    const r = new DecayedRatio();
    r.add(100, 1000, 0, 1000); // 0.1 per token
    r.add(400, 1000, 1000, 1000); // 0.4 per token, one half-life later
    assert.ok(Math.abs(r.value() - (50 + 400) / (500 + 1000)) < 1e-12, String(r.value()));
  });

  it('ignores negative, infinite and empty samples, and forgets everything on reset', () => {
    const r = new DecayedRatio();
    r.add(-1, 100, 0, 1000);
    r.add(Infinity, 100, 0, 1000);
    r.add(10, 0, 0, 1000);
    assert.equal(r.value(), -1);
    r.add(10, 100, 0, 1000);
    r.reset();
    assert.equal(r.value(), -1);
  });

  it('fits the line through samples spread along it: slope and intercept', () => {
    const r = new DecayedRatio();
    for (let i = 0; i < 12; i++) {
      const x = 500 + 400 * i;
      r.add(20 + 0.05 * x, x, i, 10_000);
    }
    const slope = r.lineSlope();
    assert.ok(Math.abs(slope - 0.05) < 1e-9, String(slope));
    assert.ok(Math.abs(r.lineIntercept(slope) - 20) < 1e-6, String(r.lineIntercept(slope)));
  });

  it('fits no line from too few samples, from samples of one size, or one with a negative intercept', () => {
    const few = new DecayedRatio();
    for (let i = 0; i < 5; i++) few.add(20 + 0.05 * (500 + 400 * i), 500 + 400 * i, i, 10_000);
    assert.equal(few.lineSlope(), -1);
    const same = new DecayedRatio();
    for (let i = 0; i < 12; i++) same.add(70 + (i % 2), 1000, i, 10_000);
    assert.equal(same.lineSlope(), -1);
    const negative = new DecayedRatio();
    for (let i = 0; i < 12; i++) negative.add(0.1 * (500 + 400 * i) - 40, 500 + 400 * i, i, 10_000);
    assert.equal(negative.lineSlope(), -1);
    assert.ok(negative.value() > 0);
  });
});
