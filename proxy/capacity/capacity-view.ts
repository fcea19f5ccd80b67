/**
 * The JSON of `GET /admin/capacity`: each pool's recommendation with every input and where it came
 * from. Shared by the admin API (which writes it) and `sluice capacity --admin` (which reads it);
 * it formats reports and computes nothing new.
 */
import { formatFormula } from './capacity-model.js';
import type { PoolCapacityReport } from './pool-capacity.js';

/** The formula every pool's `recommended_nodes` follows. */
export const CAPACITY_FORMULA =
  'nodes = ceil(items_per_second × time_per_item ÷ batch_size ÷ target_utilisation)';

/** One input of the formula: its value (null when not measured) and its origin. */
export interface CapacityInputView {
  value: number | null;
  source: string;
}

/** One pool in `GET /admin/capacity`. */
export interface PoolCapacityView {
  pool: string;
  /** Configured window, ms. */
  window_ms: number;
  /** Time the figures cover, ms (less than `window_ms` just after start or a change). */
  span_ms: number;
  /** Nodes configured in the pool. */
  nodes: number;
  /** Nodes taking traffic now. */
  available_nodes: number;
  inputs: {
    items_per_second: CapacityInputView;
    time_per_item_ms: CapacityInputView;
    batch_size: CapacityInputView & {
      /** Mean items carried by one upstream call (observed). */
      items_per_call: number | null;
      /** Calls one node works on at once. */
      calls_per_node: number | null;
      calls_per_node_source: string | null;
    };
    target_utilisation: CapacityInputView;
  };
  upstream_calls_per_second: number;
  mean_calls_in_flight: number;
  /** Node-equivalents kept fully busy by the load. */
  busy_nodes: number;
  /** Busy nodes ÷ configured nodes (above the target: scale out; above 1: overloaded). */
  utilisation_now: number | null;
  recommended_nodes: number;
  /** The formula with this pool's numbers, or null when an input is missing. */
  formula: string | null;
  note: string | null;
  /** Increases each time the pool's figures are recomputed. */
  sequence: number;
}

/** The whole `GET /admin/capacity` body. */
export interface CapacityView {
  formula: string;
  pools: PoolCapacityView[];
}

/** Builds one pool's view from its latest report. */
export function poolCapacityView(r: PoolCapacityReport): PoolCapacityView {
  return {
    pool: r.pool,
    window_ms: r.windowMs,
    span_ms: r.spanMs,
    nodes: r.nodes,
    available_nodes: r.availableNodes,
    inputs: {
      items_per_second: {
        value: r.itemsPerSecond,
        source: 'observed: items the nodes were given (micro-batched items + unbatched calls) ÷ span',
      },
      time_per_item_ms: {
        value: r.timePerItemMs,
        source:
          "observed: mean upstream time of one call = mean calls in flight ÷ calls per second (Little's law)",
      },
      batch_size: {
        value: r.batchSize,
        source: 'items per call (observed) × calls per node',
        items_per_call: r.itemsPerCall,
        calls_per_node: r.callsPerNode,
        calls_per_node_source: r.callsPerNodeSource,
      },
      target_utilisation: { value: r.targetUtilisation, source: r.targetUtilisationSource },
    },
    upstream_calls_per_second: r.upstreamCallsPerSecond,
    mean_calls_in_flight: r.meanCallsInFlight,
    busy_nodes: r.busyNodes,
    utilisation_now: r.utilisationNow,
    recommended_nodes: r.recommendedNodes,
    formula: r.recommendation === null ? null : formatFormula(r.recommendation),
    note: r.note,
    sequence: r.sequence,
  };
}

/** The `GET /admin/capacity` body for `reports`. */
export function capacityView(reports: readonly PoolCapacityReport[]): CapacityView {
  return { formula: CAPACITY_FORMULA, pools: reports.map(poolCapacityView) };
}
