/** The latency controller as pure logic: shrink near the objective, grow back far below it, bounds. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LatencyController } from '../../proxy/batch/latency-controller.js';
import { shareTokens } from '../../proxy/batch/embeddings-codec.js';

describe('latency controller', () => {
  it('starts at the configured limits and leaves them alone without an objective', () => {
    const c = new LatencyController(32, 5, 0, []);
    for (let i = 0; i < 10; i++) c.observe(1000);
    assert.equal(c.batchSize, 32);
    assert.equal(c.waitMs, 5);
  });

  it('shrinks size and wait when latency approaches the objective, never below one item', () => {
    const c = new LatencyController(32, 8, 100, []);
    c.observe(90);
    assert.equal(c.batchSize, 24);
    assert.equal(c.waitMs, 6);
    for (let i = 0; i < 50; i++) c.observe(90);
    assert.equal(c.batchSize, 1);
    assert.equal(c.waitMs, 0);
  });

  it('grows back toward the configured limits when latency is far below the objective', () => {
    const c = new LatencyController(32, 8, 100, []);
    for (let i = 0; i < 50; i++) c.observe(95);
    for (let i = 0; i < 200; i++) c.observe(5);
    assert.equal(c.batchSize, 32);
    assert.equal(c.waitMs, 8);
  });

  it('holds steady between the low and high water marks', () => {
    const c = new LatencyController(32, 8, 100, []);
    c.observe(65);
    c.observe(65);
    assert.equal(c.batchSize, 32);
    assert.equal(c.waitMs, 8);
  });

  it('snaps the size limit to preferred sizes', () => {
    const c = new LatencyController(32, 8, 100, [8, 16, 32]);
    c.observe(90);
    assert.equal(c.batchSize, 16);
    for (let i = 0; i < 20; i++) c.observe(90);
    assert.equal(c.batchSize, 1);
    for (let i = 0; i < 200; i++) c.observe(1);
    assert.equal(c.batchSize, 32);
  });
});

describe('usage sharing', () => {
  it('splits tokens in proportion to weight with shares that add up exactly', () => {
    assert.deepEqual(shareTokens(10, [1, 1, 1]), [4, 3, 3]);
    assert.deepEqual(shareTokens(7, [0, 0]), [4, 3]);
    const shares = shareTokens(1001, [3, 5, 7, 11, 13]);
    assert.equal(
      shares.reduce((a, x) => a + x, 0),
      1001,
    );
  });
});
