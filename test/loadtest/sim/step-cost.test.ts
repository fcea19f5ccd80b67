/**
 * The step-cost formulas with the calibrated H100 profile reproduce the figures they were fitted to
 * (gpu-inference-facts.md, "Suggested simulator defaults").
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadSimProfile } from '../../../loadtest/sim/profile-loader.js';
import { stepCostMs } from '../../../loadtest/sim/step-cost.js';

const close = (actual: number, expected: number, tolerance: number, what: string): void =>
  assert.ok(Math.abs(actual - expected) <= tolerance, `${what}: ${actual.toFixed(2)} vs ${expected}`);

describe('stepCostMs', () => {
  const h100 = loadSimProfile('llama-8b-h100-bf16');
  const decode = (b: number, ctx: number): number =>
    stepCostMs(h100, { prefillTokens: 0, decoders: b, decodeContextTokens: b * ctx });

  it('gives the published decode step times for 1.2k-token contexts on the H100 profile', () => {
    close(decode(1, 1200), 6.1, 0.1, 'B=1');
    close(decode(32, 1200), 8.5, 0.3, 'B=32');
    close(decode(64, 1200), 11.0, 0.3, 'B=64');
    close(decode(128, 1200), 16.1, 0.5, 'B=128');
    close(decode(256, 1200), 26, 1, 'B=256');
  });

  it('prices prefill as a fixed cost plus uncached tokens over the prefill rate', () => {
    close(
      stepCostMs(h100, { prefillTokens: 28_000, decoders: 0, decodeContextTokens: 0 }),
      1012,
      0.01,
      '28k tokens',
    );
    assert.equal(stepCostMs(h100, { prefillTokens: 0, decoders: 0, decodeContextTokens: 0 }), 0);
  });

  it('adds a prefill to the running batch’s step (chunked prefill shares the step)', () => {
    const both = stepCostMs(h100, { prefillTokens: 1000, decoders: 8, decodeContextTokens: 8000 });
    const prefill = stepCostMs(h100, { prefillTokens: 1000, decoders: 0, decodeContextTokens: 0 });
    close(both, prefill + decode(8, 1000), 1e-9, 'mixed step');
  });
});
