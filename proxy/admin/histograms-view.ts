/**
 * `GET /admin/histograms?metric=KEY`: the HDR histograms of one quantity in HdrHistogram's
 * compressed form (base64, the `HISTFAA…` encoding every HdrHistogram library decodes), one per
 * series, since start or over the window, so that a tool can merge several instances exactly
 * (`sluice stats`). Off the request path.
 */
import { encodeIntoCompressedBase64 } from 'hdr-histogram-js';
import type { SeriesRegistry } from '../metrics/series-registry.js';
import { METRICS, metricByKey } from '../metrics/series-metrics.js';
import { scratchHistogram } from '../metrics/windowed-histogram.js';

/** One series' histogram. */
export interface EncodedHistogram {
  route: string;
  pool: string;
  node: string;
  tenant: string;
  count: number;
  /** HdrHistogram compressed base64 of the recorded values (multiply by `value_scale`). */
  hdr: string;
}

/** The `/admin/histograms` body. */
export interface HistogramsBody {
  metric: string;
  /** Base unit after scaling: `seconds`, `tokens`, `items`. */
  unit: string;
  /** Recorded value × value_scale = value in `unit` (1e-6: latencies are recorded in µs). */
  value_scale: number;
  view: 'window' | 'total';
  window_seconds: number;
  histograms: EncodedHistogram[];
}

/** A 400 answer: what was wrong with the query. */
export class HistogramsQueryError extends Error {}

/** Builds the body for `query` (`metric`, `view` = total|window, `kind` = route|tenant|all). */
export function histogramsView(series: SeriesRegistry, query: URLSearchParams): HistogramsBody {
  const key = query.get('metric') ?? '';
  const def = metricByKey(key);
  if (def === undefined)
    throw new HistogramsQueryError(
      `metric must be one of ${METRICS.map((m) => m.key).join(', ')}${key === '' ? '' : ` (got "${key}")`}`,
    );
  const view = query.get('view') ?? 'total';
  if (view !== 'total' && view !== 'window') throw new HistogramsQueryError('view must be total or window');
  const kind = query.get('kind') ?? 'all';
  if (kind !== 'all' && kind !== 'route' && kind !== 'tenant')
    throw new HistogramsQueryError('kind must be all, route or tenant');
  const members = [
    ...(kind === 'tenant' ? [] : [...series.routes()]),
    ...(kind === 'route' ? [] : [...series.tenants()]),
  ];
  const h = scratchHistogram(def.scale);
  const out: EncodedHistogram[] = [];
  try {
    for (const s of members) {
      const w = s.peek(def.id);
      if (w === null) continue;
      h.reset();
      if (view === 'window') w.addWindowTo(h);
      else w.addTotalTo(h);
      if (h.totalCount === 0) continue;
      out.push({ ...s.labels, count: h.totalCount, hdr: encodeIntoCompressedBase64(h) });
    }
  } finally {
    h.destroy();
  }
  return {
    metric: def.key,
    unit: def.unit,
    value_scale: def.scale.toBase,
    view,
    window_seconds: (series.shape.slices * series.shape.sliceMs) / 1000,
    histograms: out,
  };
}
