/**
 * The decaying TTFB average: first sample, equal weight for simultaneous samples, halving of a
 * sample's weight per half-life, reset, and rejection of bad samples.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { recordTtfb, ttfbSampleWeight } from '../../proxy/balance/ttfb-ewma.js';
import { TestFleet } from './fleet.js';

const fleet = new TestFleet();
afterEach(() => fleet.close());

const H = 10_000; // half-life, ms

function close(actual: number, expected: number, tolerance = 1e-9): void {
  assert.ok(Math.abs(actual - expected) <= tolerance, `${actual} vs ${expected}`);
}

describe('recordTtfb', () => {
  it('sets the average and its time from the first sample', () => {
    const node = fleet.node(1);
    recordTtfb(node, 120, 5000, H);
    assert.equal(node.ttfbEwmaMs, 120);
    assert.equal(node.ttfbUpdatedMs, 5000);
    assert.equal(ttfbSampleWeight(node), 1);
  });

  it('weighs samples taken at the same instant equally', () => {
    const node = fleet.node(1);
    recordTtfb(node, 100, 0, H);
    recordTtfb(node, 200, 0, H);
    recordTtfb(node, 300, 0, H);
    close(node.ttfbEwmaMs, 200);
    assert.equal(ttfbSampleWeight(node), 3);
  });

  it('halves an old sample weight every half-life', () => {
    const node = fleet.node(1);
    recordTtfb(node, 100, 0, H);
    recordTtfb(node, 200, H, H);
    // weights 0.5 (100 ms, one half-life old) and 1 (200 ms): (50 + 200) / 1.5
    close(node.ttfbEwmaMs, 250 / 1.5);
    close(ttfbSampleWeight(node), 1.5);
    recordTtfb(node, 400, 3 * H, H);
    // the earlier weights are now 0.125 and 0.25
    close(node.ttfbEwmaMs, (0.125 * 100 + 0.25 * 200 + 400) / 1.375);
    assert.equal(node.ttfbUpdatedMs, 3 * H);
  });

  it('lets a sample after a long silence all but replace the average', () => {
    const node = fleet.node(1);
    for (let t = 0; t < 100; t++) recordTtfb(node, 80, t * 10, H);
    recordTtfb(node, 900, 1000 + 20 * H, H);
    assert.ok(node.ttfbEwmaMs > 899, String(node.ttfbEwmaMs));
  });

  it('moves by one sample share under steady traffic, not by the time gap', () => {
    const node = fleet.node(1);
    for (let t = 0; t < 1000; t++) recordTtfb(node, 100, t, H); // 1000 samples within 1 s
    recordTtfb(node, 1100, 1000, H);
    // About a thousandth of the way from 100 to 1100, not ~0 (gap-weighted EWMA) nor the whole way.
    assert.ok(node.ttfbEwmaMs > 100.5 && node.ttfbEwmaMs < 102, String(node.ttfbEwmaMs));
  });

  it('starts over after the average is reset to -1', () => {
    const node = fleet.node(1);
    recordTtfb(node, 100, 0, H);
    recordTtfb(node, 100, 1, H);
    node.ttfbEwmaMs = -1;
    recordTtfb(node, 700, 2, H);
    assert.equal(node.ttfbEwmaMs, 700);
    assert.equal(ttfbSampleWeight(node), 1);
  });

  it('treats an average set directly as one sample', () => {
    const node = fleet.node(1);
    node.ttfbEwmaMs = 100;
    node.ttfbUpdatedMs = 0;
    recordTtfb(node, 300, 0, H);
    close(node.ttfbEwmaMs, 200);
  });

  it('ignores negative and non-finite samples', () => {
    const node = fleet.node(1);
    recordTtfb(node, -5, 0, H);
    recordTtfb(node, Number.NaN, 0, H);
    recordTtfb(node, Infinity, 0, H);
    assert.equal(node.ttfbEwmaMs, -1);
    recordTtfb(node, 40, 0, H);
    recordTtfb(node, Number.NaN, 1, H);
    assert.equal(node.ttfbEwmaMs, 40);
  });

  it('keeps only the latest sample when the half-life is 0', () => {
    const node = fleet.node(1);
    recordTtfb(node, 40, 0, 0);
    recordTtfb(node, 90, 0, 0);
    assert.equal(node.ttfbEwmaMs, 90);
  });

  it('never moves the update time backwards for a late sample', () => {
    const node = fleet.node(1);
    recordTtfb(node, 100, 500, H);
    recordTtfb(node, 300, 400, H);
    close(node.ttfbEwmaMs, 200);
    assert.equal(node.ttfbUpdatedMs, 500);
  });
});
