/**
 * The capacity formula: how many nodes a load needs, `ceil(items/s × time per item ÷ batch size ÷
 * target utilisation)`, with its inputs checked and echoed. Pure arithmetic: it never reads live
 * state, clocks or the network.
 */

/** The inputs of one recommendation. */
export interface CapacityInputs {
  /** Load offered to the pool, items/s; 0 means no load (and 0 nodes). */
  itemsPerSecond: number; // items/s
  /** Mean model (upstream) time of one upstream call, ms; must be > 0. */
  timePerItemMs: number; // ms
  /**
   * Items one node works on at once during that time, > 0 (a mean, so it may be fractional): items
   * per upstream call × calls a node runs concurrently.
   */
  batchSize: number; // items
  /** Share of each node's capacity the fleet should use, in (0, 1]. */
  targetUtilisation: number; // ratio
  /** Nodes serving today, an integer ≥ 0; null when unknown. Only used for `utilisationNow`. */
  currentNodes?: number | null; // nodes
}

/** What `recommendNodes` returns. */
export interface CapacityRecommendation {
  /** Nodes needed to carry the load at the target utilisation: the formula's result. */
  nodes: number; // nodes
  /**
   * Nodes kept fully busy by the load (`items/s × s/item ÷ batch size`), before the utilisation
   * margin: the work the load represents, in node-equivalents.
   */
  busyNodes: number; // nodes
  /** `busyNodes ÷ currentNodes`: > 1 means the current fleet is over capacity; null without a node count. */
  utilisationNow: number | null; // ratio
  /** The inputs, `currentNodes` resolved to null when not given. */
  inputs: Required<CapacityInputs>;
}

/** An input out of range; `field` names it as in `CapacityInputs`. */
export class CapacityInputError extends RangeError {
  override readonly name = 'CapacityInputError';
  readonly field: keyof CapacityInputs;

  constructor(field: keyof CapacityInputs, message: string) {
    super(message);
    this.field = field;
  }
}

function finite(field: keyof CapacityInputs, label: string, v: number): void {
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw new CapacityInputError(field, `${label} must be a finite number, got ${String(v)}`);
}

/** Checks every input; throws `CapacityInputError` naming the first bad one. */
function validateCapacityInputs(inputs: CapacityInputs): void {
  finite('itemsPerSecond', 'items per second', inputs.itemsPerSecond);
  if (inputs.itemsPerSecond < 0)
    throw new CapacityInputError(
      'itemsPerSecond',
      `items per second must be ≥ 0, got ${inputs.itemsPerSecond}`,
    );
  finite('timePerItemMs', 'time per item', inputs.timePerItemMs);
  if (inputs.timePerItemMs <= 0)
    throw new CapacityInputError(
      'timePerItemMs',
      `time per item must be > 0 ms, got ${inputs.timePerItemMs}`,
    );
  finite('batchSize', 'batch size', inputs.batchSize);
  if (inputs.batchSize <= 0)
    throw new CapacityInputError('batchSize', `batch size must be > 0 items, got ${inputs.batchSize}`);
  finite('targetUtilisation', 'target utilisation', inputs.targetUtilisation);
  if (inputs.targetUtilisation <= 0 || inputs.targetUtilisation > 1)
    throw new CapacityInputError(
      'targetUtilisation',
      `target utilisation must be in (0, 1], got ${inputs.targetUtilisation}`,
    );
  const n = inputs.currentNodes;
  if (n !== undefined && n !== null && (!Number.isInteger(n) || n < 0))
    throw new CapacityInputError('currentNodes', `current nodes must be an integer ≥ 0, got ${n}`);
}

/**
 * `ceil` that ignores floating-point dust: 40 × 0.1 ÷ 4 ÷ 0.5 is 2.0000000000000004 in binary,
 * and must not become 3 nodes.
 */
function ceilExact(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - r) <= 1e-9 * Math.max(1, Math.abs(x)) ? r : Math.ceil(x);
}

/**
 * The recommendation for `inputs`. Throws `CapacityInputError` on a bad input. Any positive load
 * needs at least one node; no load needs none.
 *
 * @example
 * recommendNodes({ itemsPerSecond: 40, timePerItemMs: 100, batchSize: 4, targetUtilisation: 0.5 });
 * // → { nodes: 2, busyNodes: 1, utilisationNow: null, ... }
 */
export function recommendNodes(inputs: CapacityInputs): CapacityRecommendation {
  validateCapacityInputs(inputs);
  const { itemsPerSecond, timePerItemMs, batchSize, targetUtilisation } = inputs;
  const currentNodes = inputs.currentNodes ?? null;
  const busyNodes = (itemsPerSecond * timePerItemMs) / 1000 / batchSize;
  const raw = busyNodes / targetUtilisation;
  const nodes = itemsPerSecond === 0 ? 0 : Math.max(1, ceilExact(raw));
  return {
    nodes,
    busyNodes,
    utilisationNow: currentNodes === null || currentNodes === 0 ? null : busyNodes / currentNodes,
    inputs: { itemsPerSecond, timePerItemMs, batchSize, targetUtilisation, currentNodes },
  };
}

/** Rounds for display: at most `digits` significant digits, no trailing zeros. */
export function roundForDisplay(x: number, digits = 4): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  return Number(x.toPrecision(digits));
}

/**
 * The formula with the recommendation's numbers in it, for people:
 * `nodes = ceil(40 items/s × 0.1 s ÷ 4 items ÷ 0.5) = ceil(2) = 2`.
 */
export function formatFormula(rec: CapacityRecommendation): string {
  const i = rec.inputs;
  const raw = rec.busyNodes / i.targetUtilisation;
  const d = roundForDisplay;
  return (
    `nodes = ceil(${d(i.itemsPerSecond)} items/s × ${d(i.timePerItemMs / 1000)} s ÷ ${d(i.batchSize)} items` +
    ` ÷ ${d(i.targetUtilisation)}) = ceil(${d(raw)}) = ${rec.nodes}`
  );
}
