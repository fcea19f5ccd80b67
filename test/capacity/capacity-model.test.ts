/**
 * The capacity formula: nodes = ceil(items/s × time per item ÷ batch size ÷ target utilisation),
 * its input checks, its rounding and the formula text shown to people.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CapacityInputError, formatFormula, recommendNodes } from '../../proxy/capacity/capacity-model.js';

void describe('recommendNodes', () => {
  void it('divides the work by what one node carries and by the target utilisation, rounding up', () => {
    const r = recommendNodes({
      itemsPerSecond: 100,
      timePerItemMs: 250,
      batchSize: 8,
      targetUtilisation: 0.7,
    });
    // 100 × 0.25 ÷ 8 = 3.125 busy nodes; ÷ 0.7 = 4.46
    assert.equal(r.busyNodes, 3.125);
    assert.equal(r.nodes, 5);
  });

  void it('does not add a node for floating-point dust when the result is a whole number', () => {
    // 40 × 0.1 ÷ 4 ÷ 0.5 is 2.0000000000000004 in binary arithmetic.
    const r = recommendNodes({
      itemsPerSecond: 40,
      timePerItemMs: 100,
      batchSize: 4,
      targetUtilisation: 0.5,
    });
    assert.equal(r.nodes, 2);
    const exact = recommendNodes({
      itemsPerSecond: 30,
      timePerItemMs: 100,
      batchSize: 1,
      targetUtilisation: 1,
    });
    assert.equal(exact.nodes, 3);
  });

  void it('recommends one node for any load however small, and none without load', () => {
    const tiny = recommendNodes({
      itemsPerSecond: 0.01,
      timePerItemMs: 1,
      batchSize: 64,
      targetUtilisation: 1,
    });
    assert.equal(tiny.nodes, 1);
    const none = recommendNodes({
      itemsPerSecond: 0,
      timePerItemMs: 100,
      batchSize: 1,
      targetUtilisation: 0.7,
    });
    assert.equal(none.nodes, 0);
    assert.equal(none.busyNodes, 0);
  });

  void it('reports the utilisation of the current fleet when a node count is given', () => {
    const r = recommendNodes({
      itemsPerSecond: 60,
      timePerItemMs: 100,
      batchSize: 2,
      targetUtilisation: 0.75,
      currentNodes: 4,
    });
    assert.equal(r.busyNodes, 3);
    assert.equal(r.utilisationNow, 0.75);
    assert.equal(r.nodes, 4);
    const over = recommendNodes({ ...r.inputs, currentNodes: 2 });
    assert.equal(over.utilisationNow, 1.5);
    assert.equal(recommendNodes({ ...r.inputs, currentNodes: null }).utilisationNow, null);
  });

  void it('echoes every input, with an absent node count as null', () => {
    const inputs = { itemsPerSecond: 10, timePerItemMs: 50, batchSize: 2, targetUtilisation: 0.9 };
    assert.deepEqual(recommendNodes(inputs).inputs, { ...inputs, currentNodes: null });
  });
});

void describe('recommendNodes input checks', () => {
  const good = { itemsPerSecond: 10, timePerItemMs: 50, batchSize: 2, targetUtilisation: 0.9 };
  const cases: [string, Partial<typeof good> & { currentNodes?: number }, string, RegExp][] = [
    ['negative load', { itemsPerSecond: -1 }, 'itemsPerSecond', /items per second must be ≥ 0/],
    ['infinite load', { itemsPerSecond: Infinity }, 'itemsPerSecond', /finite number/],
    ['zero time per item', { timePerItemMs: 0 }, 'timePerItemMs', /time per item must be > 0 ms/],
    ['NaN time per item', { timePerItemMs: NaN }, 'timePerItemMs', /finite number, got NaN/],
    ['zero batch size', { batchSize: 0 }, 'batchSize', /batch size must be > 0/],
    ['zero utilisation', { targetUtilisation: 0 }, 'targetUtilisation', /\(0, 1\], got 0/],
    ['utilisation above 1', { targetUtilisation: 1.2 }, 'targetUtilisation', /\(0, 1\], got 1.2/],
    ['fractional node count', { currentNodes: 1.5 }, 'currentNodes', /integer ≥ 0/],
  ];
  for (const [what, patch, field, message] of cases) {
    void it(`rejects a ${what} naming the input`, () => {
      assert.throws(
        () => recommendNodes({ ...good, ...patch }),
        (e: unknown) => e instanceof CapacityInputError && e.field === field && message.test(e.message),
      );
    });
  }

  void it('accepts a utilisation of exactly 1 and fractional batch sizes (observed means)', () => {
    const r = recommendNodes({
      itemsPerSecond: 68,
      timePerItemMs: 100,
      batchSize: 3.4,
      targetUtilisation: 1,
    });
    // 68 × 0.1 ÷ 3.4 = 2 busy nodes, all of them at a target of 1.
    assert.equal(r.nodes, 2);
    assert.equal(r.inputs.batchSize, 3.4);
  });
});

void describe('formatFormula', () => {
  void it('writes the formula with the numbers in it and the result', () => {
    const r = recommendNodes({
      itemsPerSecond: 40,
      timePerItemMs: 100,
      batchSize: 4,
      targetUtilisation: 0.7,
    });
    assert.equal(formatFormula(r), 'nodes = ceil(40 items/s × 0.1 s ÷ 4 items ÷ 0.7) = ceil(1.429) = 2');
  });
});
